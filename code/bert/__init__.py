"""The BERT benchmark (BERT-Large on SQuAD v1.1): download, preprocessing, dataset, model, engine and backends."""
