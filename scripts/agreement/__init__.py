"""The accuracy gate of the BERT engines (``make agreement``, ``python -m scripts.agreement``).

A tool, not part of the product: the harness never imports it. ``gate`` runs the check; ``text_inputs`` builds
SQuAD-like features from real English text; ``finetune_qa`` trains the QA proxy the gate measures F1 on.
"""
