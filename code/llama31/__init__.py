"""Llama 3.1 8B Instruct: MLPerf Inference's summarization benchmark ``llama3.1-8b`` from v5.1, after GPT-J."""
