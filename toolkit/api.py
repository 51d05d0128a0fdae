"""The Python API: one function per CLI verb (toolkit.commands.<verb>), each returning what the CLI prints.

    >>> from toolkit.api import diagnose_command
    >>> from toolkit.commands.common import load_config
    >>> res = diagnose_command("resnet_small", load_config(None))
"""

from toolkit.commands.cache import cache_command
from toolkit.commands.compare_dumps import compare_dumps_command
from toolkit.commands.compile import compile_command
from toolkit.commands.diagnose import diagnose_command
from toolkit.commands.doctor import doctor_command
from toolkit.commands.gears import gears_command
from toolkit.commands.memcheck import memcheck_command
from toolkit.commands.parse_log import parse_log_command
from toolkit.commands.profile import profile_command
from toolkit.commands.regress import regress_command
from toolkit.commands.run import run_command
from toolkit.commands.signoff import signoff_command
from toolkit.commands.tune import tune_command

__all__ = ["cache_command", "compare_dumps_command", "compile_command", "diagnose_command", "doctor_command",
           "gears_command", "memcheck_command", "parse_log_command", "profile_command", "regress_command",
           "run_command", "signoff_command", "tune_command"]
