"""The programs of one LoadGen test: its child process, and one worker process per GPU."""
