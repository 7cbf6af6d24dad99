"""See the web dashboard on a busy cluster: daemons, emulated agents and a stream of jobs.

Starts ``halyard controlplane`` (the bundled 64-GPU ``default`` cluster, Tiresias,
cluster time running ``--speedup`` times faster than wall time) and one emulated agent per
node, then submits ``--jobs`` jobs of four tenants at random intervals. Open the printed
URL while it runs; with ``--screenshot PATH`` it also saves what headless Chromium shows
at the end (headless Chromium via selenium, ``pip install -e '.[test]'``;
docs/img/dashboard-live.png was made with the defaults). Ctrl-C stops it all.

    .venv/bin/python examples/dashboard_demo.py [--jobs 60] [--speedup 240] [--screenshot out.png]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from halyard.datamodel import load_cluster
from halyard.testing.browser import headless_chromium
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

CLI = [sys.executable, "-m", "halyard.cli"]
MODELS = ("resnet50", "bert-large", "transformer-xl", "vgg11", "gnmt")
TENANTS = ("vision", "nlp", "speech", "rl")
SETTLE_S = 3.0  # wall seconds the page gets to load and draw before the screenshot


async def submit_jobs(target: str, jobs: int, rng: random.Random) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = jgrpc.JobServiceStub(channel)
        for i in range(jobs):
            spec = tpb.JobSpec(job_id=f"train-{i:03d}", model=rng.choice(MODELS), tenant=rng.choice(TENANTS),
                               num_gpus=rng.choice((1, 2, 4, 8, 8, 16)), iterations=rng.choice((2_000, 8_000, 30_000)))
            await stub.SubmitJob(jpb.SubmitJobRequest(spec=spec))
            await asyncio.sleep(rng.uniform(0.2, 1.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--speedup", type=float, default=240.0)
    parser.add_argument("--grpc", default="127.0.0.1:50999")
    parser.add_argument("--http", default="127.0.0.1:8999")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--screenshot", type=Path, help="save headless Chromium's view of the page here at the end")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="halyard-demo-"))
    cp = subprocess.Popen([*CLI, "controlplane", "--cluster", "default", "--db", str(state / "state.db"),
                           "--listen", args.grpc, "--http", args.http, "--speedup", str(args.speedup),
                           "--policy", "tiresias", "--round-s", "120"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    agents = [subprocess.Popen([*CLI, "agent", "--control-plane", args.grpc, "--node", node.name],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for node in load_cluster("default").nodes]
    try:
        cp.stdout.readline()  # "listening on ..."
        print(f"dashboard: http://{args.http}/   (Ctrl-C to stop)", flush=True)
        asyncio.run(submit_jobs(args.grpc, args.jobs, random.Random(args.seed)))
        if args.screenshot is not None:
            driver = headless_chromium(1440, 1100)
            try:
                driver.get(f"http://{args.http}/")
                time.sleep(SETTLE_S)
                driver.save_screenshot(str(args.screenshot))
            finally:
                driver.quit()
            print(f"screenshot: {args.screenshot}")
        else:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for agent in agents:
            agent.terminate()
        cp.send_signal(signal.SIGTERM)
        cp.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
