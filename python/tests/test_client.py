"""The Python client against a real tuneforge server and agent on loopback (tokens
checked): submit, watch, best per task, the log as records and a file, and each error
class. TUNEFORGE_BIN names the folder with tuneforge, tuneforge-server and
tuneforge-agent; TUNEFORGE_TEST_MODELS the test models' folder (mlp.onnx)."""
import json
import os
import pathlib
import re
import secrets
import subprocess
import threading
import time

import pytest

import tuneforge

BIN = pathlib.Path(os.environ.get("TUNEFORGE_BIN", "build/bin"))
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A server with tokens (alice: admin, bob: user) and one agent of key "py"."""
    d = tmp_path_factory.mktemp("farm")
    tokens = {"alice": secrets.token_hex(16), "bob": secrets.token_hex(16), "agent": secrets.token_hex(16)}
    (d / "tokens").write_text(f"admin alice {tokens['alice']}\nuser bob {tokens['bob']}\n"
                              f"agent py-agent {tokens['agent']}\n")
    (d / "tokens").chmod(0o600)
    (d / "agent.token").write_text(tokens["agent"] + "\n")
    (d / "agent.token").chmod(0o600)
    server = subprocess.Popen([str(BIN / "tuneforge-server"), "--listen", "127.0.0.1:0", "--db", str(d / "py.db"),
                               "--tokens", str(d / "tokens")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on port (\d+)", line)
        if m:
            port = int(m.group(1))
    assert port, "the server did not start"
    address = f"127.0.0.1:{port}"
    agent = subprocess.Popen([str(BIN / "tuneforge-agent"), "--server", address, "--device-key", "py",
                              "--token-file", str(d / "agent.token"), "--quiet-busy-pct", "0", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield {"address": address, "tokens": tokens, "dir": d}
    agent.terminate()
    server.terminate()
    agent.wait(30)
    server.wait(30)


def test_a_job_of_several_tasks_is_submitted_watched_and_its_records_read(farm, tmp_path):
    with tuneforge.Client(farm["address"], token=farm["tokens"]["bob"]) as client:
        tasks = {"matmul M=24 N=20 K=16": 2, "matmul M=16 N=24 K=20": 1}
        job = client.submit_tasks(tasks, trials=8, round_trials=4, device_key="py", policy="random", batch_size=2)
        done = client.watch(job, progress=False)
        assert done["state"] == "SUCCEEDED" and done["trials_done"] == 8
        assert [t["weight"] for t in done["tasks"]] == [2, 1]
        assert sum(t["trials"] for t in done["tasks"]) == 8
        for t in done["tasks"]:
            assert t["best"]["gflops"] > 0 and isinstance(t["best"]["config"], dict)
        assert done["estimated_seconds"] == pytest.approx(sum(t["weight"] * t["best"]["seconds"]
                                                              for t in done["tasks"]), rel=1e-9)
        assert client.job(job)["state"] == "SUCCEEDED"
        assert [j["job_id"] for j in client.jobs()] == [job]

        rows = client.records(as_dataframe=False)
        mine = [r for r in rows if r["job_id"] == job]
        assert len(mine) > 8  # trials, baselines, re-measured finalists
        assert {r["task"] for r in mine} == {"matmul M=24 N=20 K=16 dtype=float32", "matmul M=16 N=24 K=20 dtype=float32"}
        assert all(r["median_seconds"] > 0 for r in mine if r["error"] == "none")

        path = tmp_path / "log.jsonl"
        n = client.export(str(path))
        lines = path.read_text().splitlines()
        assert json.loads(lines[0]) == {"format": "tuneforge-log", "version": 1} and len(lines) == n + 1 == len(rows) + 1
    with tuneforge.Client(farm["address"], token=farm["tokens"]["alice"]) as admin:
        counts = admin.import_log(str(path))
        assert int(counts.get("added", 0)) == 0, counts  # every record is already held


def test_errors_are_python_exceptions(farm):
    with pytest.raises(tuneforge.ServerUnavailable, match="cannot reach"):
        tuneforge.Client("127.0.0.1:1", timeout=1)
    with pytest.raises(tuneforge.ValidationError, match="HOST:PORT"):
        tuneforge.Client("localhost")
    with tuneforge.Client(farm["address"], token="not-a-token") as stranger:
        with pytest.raises(tuneforge.AuthError):
            stranger.jobs()
    with tuneforge.Client(farm["address"]) as anonymous:
        with pytest.raises(tuneforge.AuthError):
            anonymous.submit_task("matmul M=8 N=8 K=8", trials=2)
    with tuneforge.Client(farm["address"], token=farm["tokens"]["bob"]) as client:
        with pytest.raises(tuneforge.ValidationError, match="task 1"):
            client.submit_tasks({"conv9d M=1": 1}, trials=4)
        with pytest.raises(tuneforge.ValidationError, match="unknown job option"):
            client.submit_task("matmul M=8 N=8 K=8", trials=2, polcy="random")
        with pytest.raises(tuneforge.ValidationError, match="no such file"):
            client.submit_model("/nonexistent.onnx", trials=4)
        # Weights kept as external data go inside the upload: the server keeps one file.
        external = os.environ["TUNEFORGE_TEST_MODELS"] + "/mlp_external.onnx"
        uploaded = client.upload_model(external)
        assert len(uploaded["tasks"]) == 2
        assert int(uploaded["bytes"]) > os.path.getsize(external)
        not_onnx = farm["dir"] / "not.onnx"
        not_onnx.write_bytes(b"x" * 100)
        with pytest.raises(tuneforge.ValidationError, match="not.onnx"):
            client.upload_model(str(not_onnx))
        with pytest.raises(tuneforge.ValidationError, match="no job"):
            client.job("job-0-0")
        # A job no agent can take waits; cancelled, watching it raises JobFailed.
        job = client.submit_task("matmul M=8 N=8 K=8", trials=2, device_key="nobody")
        client.cancel(job)
        with pytest.raises(tuneforge.JobFailed) as failed:
            client.watch(job, progress=False)
        assert failed.value.status["state"] == "CANCELLED"


def test_the_docs_example_runs_in_at_most_15_lines(farm):
    text = DOCS.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    lines = [l for l in code.splitlines() if l.strip() and not l.strip().startswith("#")]
    assert len(lines) <= 15, f"the example has {len(lines)} lines of code"
    token_file = farm["dir"] / "bob.token"
    token_file.write_text(farm["tokens"]["bob"] + "\n")
    env = dict(os.environ, TUNEFORGE_SERVER=farm["address"], TUNEFORGE_TOKEN_FILE=str(token_file),
               TUNEFORGE_DEVICE_KEY="py", TUNEFORGE_MODEL=os.environ["TUNEFORGE_TEST_MODELS"] + "/mlp.onnx")
    run = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "estimated" in run.stdout and run.stdout.count("GFLOP/s") == 2, run.stdout  # the MLP's two tasks


def start_server(d, tokens_file, listen="127.0.0.1:0"):
    """A tuneforge-server on `listen` with the db and tokens of folder `d`; (process, port)."""
    server = subprocess.Popen([str(BIN / "tuneforge-server"), "--listen", listen, "--db", str(d / "py.db"),
                               "--tokens", str(tokens_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on port (\d+)", line)
        if m:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # keep the pipe drained
            return server, int(m.group(1))
    server.kill()
    raise AssertionError("the server did not start")


def test_watch_reattaches_when_the_server_is_killed_and_restarted(tmp_path):
    """A job waits for an agent; its server is killed (-9) and started again on the same
    port and db; the watch in progress re-attaches and follows the resumed job to its
    end once an agent comes."""
    token, agent_token = secrets.token_hex(16), secrets.token_hex(16)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"user carol {token}\nagent a {agent_token}\n")
    tokens.chmod(0o600)
    (tmp_path / "agent.token").write_text(agent_token + "\n")
    (tmp_path / "agent.token").chmod(0o600)
    server, port = start_server(tmp_path, tokens)
    address = f"127.0.0.1:{port}"
    agent = None
    try:
        with tuneforge.Client(address, token=token) as client:
            job = client.submit_task("matmul M=16 N=12 K=8", trials=3, device_key="late", policy="random")
            result = {}
            watcher = threading.Thread(target=lambda: result.update(done=client.watch(job, progress=False)))
            watcher.start()
            time.sleep(1)
            server.kill()
            server.wait(30)
            server, _ = start_server(tmp_path, tokens, listen=address)
            agent = subprocess.Popen([str(BIN / "tuneforge-agent"), "--server", address, "--device-key", "late",
                                      "--token-file", str(tmp_path / "agent.token"), "--quiet-busy-pct", "0",
                                      "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            watcher.join(300)
            assert not watcher.is_alive(), "the watch did not end"
            assert result["done"]["job_id"] == job and result["done"]["state"] == "SUCCEEDED", result
            assert result["done"]["trials_done"] == 3
    finally:
        if agent:
            agent.terminate()
            agent.wait(30)
        server.terminate()
        server.wait(30)


def test_read_tasks_reads_what_model_tasks_writes(tmp_path):
    path = tmp_path / "tasks.txt"
    path.write_text("# two layers\nmatmul M=8 N=8 K=8 weight=2.5\n\ndense M=1 N=4 K=4 bias=1 relu=0  # the head\n")
    assert tuneforge.read_tasks(str(path)) == {"matmul M=8 N=8 K=8": 2.5, "dense M=1 N=4 K=4 bias=1 relu=0": 1.0}
    path.write_text("matmul M=8 N=8 K=8 weight=-1\n")
    with pytest.raises(tuneforge.ValidationError, match="tasks.txt:1: weight must be positive"):
        tuneforge.read_tasks(str(path))
    path.write_text("matmul M=8 N=8 K=8\nmatmul M=8 N=8 K=8\n")
    with pytest.raises(tuneforge.ValidationError, match="listed twice"):
        tuneforge.read_tasks(str(path))
