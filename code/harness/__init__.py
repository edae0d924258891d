"""The C++/pybind11 core that talks to LoadGen (SUT, QSL, batcher); its Python face is ``code.harness.core``."""
