"""GPT-J 6B on CNN/DailyMail: settings every GPT-J config shares.

The closed-division rules fix generation (beam search width 4, 30 to 128 new tokens); ``num_beams`` exists for
the open division and debugging, and a run with another width is marked as not a valid result.
"""

from code.common.constants import Benchmark
from configs.configuration import BenchmarkConfiguration


class GptjBaseConfig(BenchmarkConfiguration):
    """Benchmark-wide defaults; scenario bases and system classes override them."""

    benchmark = Benchmark.GPTJ
    model_name = "6b"
    num_beams = 4
    sort_by_length = True


# GPT-J-6B generation with beam 4 takes minutes per sample on a CPU, so the CPU classes run random-weight runs on
# the tiny GPT-J-architecture model (model_name applies to random weights; a downloaded checkpoint brings its own
# architecture).
CPU_MODEL = "tiny"
