"""The plumbing every room stands on: constants, paths, logs, files and locks, downloads, faults, systems, rounds."""
