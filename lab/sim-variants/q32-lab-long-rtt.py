"""EXPERIMENTS.md Q32 in the lab: the suite on one extra constant link, 2 / 7.2 Mbit/s at 300 ms
base RTT, deep buffers (1 MiB up, 4 MiB down). As root, from the repository, after ./setup.sh:
    sudo RSFC_BUILD_DIR=build /usr/bin/python3 lab/sim-variants/q32-lab-long-rtt.py"""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import shaping  # noqa: E402
from exps import suite  # noqa: E402
shaping.LINKS["3g300"] = shaping.LinkSpec.symmetric_rtt(2_000_000, 1 * shaping.MIB, 7_200_000,
                                                       4 * shaping.MIB, 300)
suite.CONSTANT_CELLS["3g300"] = ("3g300", True)
import experiments  # noqa: E402
sys.argv = ["experiments.py", "suite", "--cells", "3g300", "--policies", "shipped", "--runs", "3",
            "--duration", "30", "--warmup", "8", "--resume", "--workdir", "/tmp/rsfc-lab-q32",
            "--no-plots", "--json", "/tmp/rsfc-lab-q32/out.json"]
sys.exit(experiments.main())
