"""What the staged system description says of a test's model: the backend's declaration decides whether one ran."""

from code.mlperf.run_record import RunRecord
from code.submission.model_info import ran_no_model, starting_weights, weight_data_types, weight_transformations


def metadata(benchmark: str, backend: str, precision: str = "fp16") -> RunRecord:
    return RunRecord({"config": {"benchmark": benchmark, "fields": {"backend": backend, "precision": precision}},
            "provenance": {"weights": "/models/bert/model.pytorch"}})


def test_the_oracle_runs_no_model_and_says_so() -> None:
    for benchmark in ("bert-99", "gptj-99.9"):
        oracle = metadata(benchmark, "oracle")
        assert ran_no_model(oracle)
        assert weight_data_types(oracle).startswith("none (oracle backend")
        assert starting_weights(oracle).startswith("none (oracle backend")
    model = metadata("bert-99", "pytorch", "fp8")
    assert not ran_no_model(model) and not ran_no_model(metadata("gptj-99", "inflight"))
    assert weight_data_types(model) == "fp8, fp16" and starting_weights(model) == "model.pytorch"


def test_an_int8_run_says_its_weights_were_quantized_per_channel() -> None:
    model = metadata("bert-99", "pytorch", "int8")
    assert weight_data_types(model) == "int8, fp16"
    assert weight_transformations(model).startswith("INT8 quantization of the matrix-product weights, symmetric with "
                                                    "per-output-channel scales")
