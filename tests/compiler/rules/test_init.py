"""The order graph-fusion rules are tried in (and the compile cache's registry digest) does not depend on which
rule module a process imported first: it decides which of two overlapping matches wins, and a different digest
made one process miss the entries another wrote."""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
for mod in sys.argv[1:]:
    __import__(mod)
from toolkit.compiler.rules import load_rules
from toolkit.cache.keys import registry_digest
print(json.dumps([[r.name for r in load_rules()], registry_digest()]))
"""


@pytest.mark.parametrize("first", [[], ["toolkit.compiler.rules.activation"], ["toolkit.compiler.rules.norm"],
                                   ["toolkit.compiler.rules.norm", "toolkit.compiler.rules.activation"]])
def test_rule_order_and_registry_digest_do_not_depend_on_import_order(first):
    def run(mods):
        out = subprocess.run([sys.executable, "-c", PROBE, *mods], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    names, digest = run(first)
    want_names, want_digest = run(["toolkit.compiler.rules.attention"])
    assert names == want_names and digest == want_digest
    # attention first (it contains Softmax/MatMul parts other rules must not take), then activations, then norms
    from toolkit.compiler.rules import RULE_MODULES, load_rules

    mods = [r.match.__module__.rsplit(".", 1)[-1] for r in load_rules()]
    assert mods == sorted(mods, key=RULE_MODULES.index)
