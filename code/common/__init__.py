"""Infrastructure shared by every benchmark: enums, fields, arguments, systems, paths, logs."""
