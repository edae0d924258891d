"""BERT-large on SQuAD v1.1: settings every BERT config shares."""

from code.common.constants import Benchmark
from configs.configuration import BenchmarkConfiguration


class BertBaseConfig(BenchmarkConfiguration):
    """Benchmark-wide defaults; scenario bases and system classes override them."""

    benchmark = Benchmark.BERT
    model_name = "large"
    sort_by_length = True
