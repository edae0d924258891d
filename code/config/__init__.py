"""The config mechanism: the fields, the config classes and their registry, ladders, tuned values, the resolution."""
