"""Submission: stage a closed-division tree from run logs, truncate its accuracy logs, run the official checker.

``stage`` builds ``build/submission/closed/<submitter>/`` from metadata.json of complete runs; ``tools`` finds a
round's unmodified official tools; ``checker`` runs truncation and the checker on the staged tree.
"""
