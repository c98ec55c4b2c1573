"""The tuneforge gRPC client: one Client per server, the server's refusals as Python
exceptions, jobs and records as plain dicts (a pandas DataFrame for records when pandas
is installed)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import json_format

from tuneforge.v1 import (database_pb2, database_pb2_grpc, farm_pb2, farm_pb2_grpc, tuning_pb2,
                          tuning_pb2_grpc)

LOG_HEADER = {"format": "tuneforge-log", "version": 1}
_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class TuneforgeError(Exception):
    """Base of this client's errors."""


class ServerUnavailable(TuneforgeError):
    """The server cannot be reached, or went away and did not come back in time."""


class AuthError(TuneforgeError):
    """The server refused the token: none given, unknown, or a role without the right."""


class ValidationError(TuneforgeError):
    """The server (or this client) refused a value; the message says which."""


class JobFailed(TuneforgeError):
    """A watched job ended FAILED or CANCELLED; `status` is its last status."""

    def __init__(self, message: str, status: Dict[str, Any]):
        super().__init__(message)
        self.status = status


def _error(e: grpc.RpcError, what: str) -> TuneforgeError:
    code, message = e.code(), f"{what}: {e.details()}"
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return AuthError(message)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE):
        return ValidationError(message)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ServerUnavailable(message)
    return TuneforgeError(message)


def _best(best: Dict[str, Any]) -> Dict[str, Any]:
    """A BestResult with its config parsed from JSON."""
    if best.get("config_json"):
        best = dict(best, config=json.loads(best["config_json"]))
    return best


def status_dict(status: tuning_pb2.JobStatus) -> Dict[str, Any]:
    """A JobStatus as a dict (proto field names; every field present); bests carry
    their config parsed as `config`."""
    d = json_format.MessageToDict(status, preserving_proto_field_name=True,
                                  always_print_fields_with_no_presence=True)
    for key in ("best", "baseline", "earlier_best"):
        if key in d:
            d[key] = _best(d[key])
    for task in d.get("tasks", []):
        if "best" in task:
            task["best"] = _best(task["best"])
    return d


def read_tasks(path: str) -> Dict[str, float]:
    """A tasks file (`tuneforge model tasks M.onnx -o FILE` writes one: a task per line
    with an optional weight=W, '#' comments) as task -> weight, for submit_tasks."""
    tasks: Dict[str, float] = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            weight = 1.0
            for w in [w for w in words if w.startswith("weight=")]:
                try:
                    weight = float(w[len("weight="):])
                except ValueError:
                    raise ValidationError(f"{path}:{number}: weight must be a number, got {w!r}") from None
                words.remove(w)
            if not weight > 0:
                raise ValidationError(f"{path}:{number}: weight must be positive, got {weight}")
            task = " ".join(words)
            if task in tasks:
                raise ValidationError(f"{path}:{number}: {task} is listed twice")
            tasks[task] = weight
    if not tasks:
        raise ValidationError(f"{path}: no task in the file")
    return tasks


def _inline_external_data(path: str) -> Optional[bytes]:
    """The model's bytes with its external-data weights inside, or None when it has
    none (or the onnx package is not installed: the file is then sent as it is)."""
    try:
        import onnx
        from onnx import external_data_helper
    except ImportError:
        return None
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # not a model: the server's importer says what is wrong
        return None
    if not any(external_data_helper.uses_external_data(t) for t in model.graph.initializer):
        return None
    try:
        external_data_helper.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    except Exception as e:
        raise ValidationError(f"{path}: cannot read its external data: {e}") from None
    return model.SerializeToString()


class Client:
    """A connection to one tuneforge server.

    address: "HOST:PORT". token: the user's token when the server checks tokens.
    tls_ca: a PEM file to verify a TLS server with (None: plaintext). timeout: seconds
    to connect and for each call that is not a watch."""

    def __init__(self, address: str, token: Optional[str] = None, tls_ca: Optional[str] = None,
                 timeout: float = 10.0):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValidationError(f"address must be HOST:PORT, got {address!r}")
        self.address, self.timeout = address, timeout
        if tls_ca:
            with open(tls_ca, "rb") as f:
                self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
        else:
            self._channel = grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise ServerUnavailable(f"cannot reach tuneforge server at {address} within {timeout} s") from None
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._tuning = tuning_pb2_grpc.TuningServiceStub(self._channel)
        self._farm = farm_pb2_grpc.FarmServiceStub(self._channel)
        self._db = database_pb2_grpc.DatabaseServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Any, request: Any, what: str) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as e:
            raise _error(e, what) from None

    # Jobs.

    def submit_task(self, task: str, trials: int = 200, **options: Any) -> str:
        """Submits a job of one task ("matmul M=512 N=512 K=512"); returns its id.
        options: device_key ("local"), policy ("model", "random", "grid", "ga"), seed,
        target, priority (1..10), batch_size, early_stop, owner."""
        spec = self._spec(trials, options)
        spec.task = task
        return self._submit(spec)

    def submit_tasks(self, tasks: Union[Mapping[str, float], Sequence[Tuple[str, float]]], trials: int,
                     round_trials: int = 32, **options: Any) -> str:
        """Submits one job of several weighted tasks (a model's: task -> occurrences),
        whose rounds the server's task scheduler runs; returns its id. Options as
        submit_task."""
        items = list(tasks.items()) if isinstance(tasks, Mapping) else list(tasks)
        if not items:
            raise ValidationError("submit_tasks needs at least one task")
        spec = self._spec(trials, options)
        spec.round_trials = round_trials
        for task, weight in items:
            spec.tasks.add(task=task, weight=float(weight))
        return self._submit(spec)

    def upload_model(self, path: str, dims: Sequence[str] = (), shapes: Sequence[str] = ()) -> Dict[str, Any]:
        """Sends an ONNX file to the server, which checks it with its importer and keeps it
        by SHA-256; returns model_hash, bytes, tasks (task, weight) and leftovers. dims:
        "NAME=N" bindings of symbolic dimensions; shapes: "INPUT=D0,D1,..." (as the CLI's
        --dim and --shape). Weights kept as ONNX external data are inlined into the
        upload (the server keeps one file) when the onnx package is installed; without
        it such a model is sent as it is and the server names the file it misses."""
        name = os.path.basename(path)
        if not os.path.isfile(path):
            raise ValidationError(f"{path}: no such file")
        inlined = _inline_external_data(path)

        def chunks():
            if inlined is not None:
                for at in range(0, max(1, len(inlined)), 1 << 20):
                    chunk = tuning_pb2.ModelChunk(data=inlined[at:at + (1 << 20)])
                    if at == 0:
                        chunk.name = name
                        chunk.dims.extend(dims)
                        chunk.shapes.extend(shapes)
                    yield chunk
                return
            with open(path, "rb") as f:
                first = True
                while True:
                    data = f.read(1 << 20)
                    if not data and not first:
                        return
                    chunk = tuning_pb2.ModelChunk(data=data)
                    if first:
                        chunk.name = name
                        chunk.dims.extend(dims)
                        chunk.shapes.extend(shapes)
                        first = False
                    yield chunk
                    if not data:
                        return

        try:
            response = self._tuning.UploadModel(chunks(), metadata=self._metadata)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise ValidationError(f"uploading {path}: {e.details()}") from None
            raise _error(e, f"uploading {path}") from None
        return json_format.MessageToDict(response, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)

    def submit_model(self, path: str, trials: int, round_trials: int = 32, dims: Sequence[str] = (),
                     shapes: Sequence[str] = (), **options: Any) -> str:
        """Uploads an ONNX model and submits a job of its tasks (each weighted by how
        often it occurs), whose rounds the server's task scheduler runs; returns the job
        id. Options as submit_task."""
        uploaded = self.upload_model(path, dims, shapes)
        spec = self._spec(trials, options)
        spec.round_trials = round_trials
        spec.model_hash = uploaded["model_hash"]
        spec.model_dims.extend(dims)
        spec.model_shapes.extend(shapes)
        spec.model_name = os.path.basename(path)
        return self._submit(spec)

    def job(self, job_id: str) -> Dict[str, Any]:
        """The job's status now (state, trials_done, best, tasks, estimated_seconds, ...)."""
        return status_dict(self._call(self._tuning.GetJob, tuning_pb2.JobRequest(job_id=job_id),
                                      f"job {job_id}"))

    def jobs(self) -> List[Dict[str, Any]]:
        """The server's jobs this token may see: job_id, owner, state, task, trials_done, trials."""
        status = self._call(self._farm.Status, farm_pb2.FarmStatusRequest(), "listing the jobs")
        return [json_format.MessageToDict(j, preserving_proto_field_name=True,
                                          always_print_fields_with_no_presence=True) for j in status.jobs]

    def cancel(self, job_id: str) -> Dict[str, Any]:
        """Asks the server to cancel the job (its owner or an admin); returns its status."""
        return status_dict(self._call(self._tuning.CancelJob, tuning_pb2.JobRequest(job_id=job_id),
                                      f"cancelling job {job_id}"))

    def watch(self, job_id: str, progress: bool = True, reconnect_timeout: float = 60.0) -> Dict[str, Any]:
        """Follows the job to its end and returns its last status; raises JobFailed when
        it failed or was cancelled. progress: a tqdm bar of trials when tqdm is
        installed. A server that restarts mid-job is re-attached to for up to
        reconnect_timeout seconds (it resumes the job under its id)."""
        bar = None
        if progress:
            try:
                from tqdm import tqdm
                bar = tqdm(unit="trial", desc=job_id)
            except ImportError:
                pass
        last: Optional[tuning_pb2.JobStatus] = None
        lost_at: Optional[float] = None
        try:
            while True:
                try:
                    for status in self._tuning.WatchJob(tuning_pb2.JobRequest(job_id=job_id),
                                                        metadata=self._metadata):
                        lost_at, last = None, status
                        if bar is not None:
                            bar.total = status.spec.trials
                            bar.n = status.trials_done
                            bar.set_postfix_str(status.last_event[:60], refresh=True)
                    if last is not None and tuning_pb2.JobState.Name(last.state) in _TERMINAL:
                        break
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        raise _error(e, f"watching job {job_id}") from None
                    lost_at = lost_at or time.monotonic()
                    if time.monotonic() - lost_at > reconnect_timeout:
                        raise ServerUnavailable(f"lost the server at {self.address} while watching job "
                                                f"{job_id} for more than {reconnect_timeout} s") from None
                    time.sleep(0.5)
        finally:
            if bar is not None:
                bar.close()
        done = status_dict(last)
        if done["state"] != "SUCCEEDED":
            raise JobFailed(f"job {job_id} {done['state'].lower()}: {done['message']}", done)
        return done

    # The tuning log.

    def records(self, since_unix_us: int = 0, until_unix_us: int = 0, as_dataframe: bool = True) -> Any:
        """Every record of the log (optionally within a time range), one dict per record
        with task, op, template, config (parsed), median_seconds, error, proposed_by,
        job_id, device_key, cpu and the record's start time; a pandas DataFrame when
        pandas is installed and as_dataframe."""
        rows = []
        for line in self._download(since_unix_us, until_unix_us):
            r = json.loads(line)
            costs = sorted(r.get("costs") or [])
            rows.append({
                "task": r["workload"]["task"], "op": r["workload"]["op"], "template": r["template"],
                "config": json.loads(r["config"]),
                "median_seconds": costs[len(costs) // 2] if costs else None,
                "error": r["error"], "proposed_by": r.get("proposed_by", ""), "job_id": r.get("job_id", ""),
                "device_key": r["target"].get("device_key", ""), "cpu": r["target"].get("cpu", ""),
                "start_unix_us": r["start_unix_us"],
            })
        if as_dataframe:
            try:
                import pandas
                return pandas.DataFrame(rows)
            except ImportError:
                pass
        return rows

    def export(self, path: str) -> int:
        """Writes the whole log to `path` in the tuneforge log format (what `tuneforge db
        export` writes and `db import` or import_log read); returns the records written."""
        n = 0
        with open(path, "w") as f:
            f.write(json.dumps(LOG_HEADER, separators=(",", ":")) + "\n")
            for line in self._download(0, 0):
                f.write(line + "\n")
                n += 1
        return n

    def import_log(self, path: str) -> Dict[str, Any]:
        """Uploads a tuneforge log file's records (idempotent: records already held are
        skipped); returns the server's counts (added, duplicates, rejected lines)."""
        with open(path) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        if not lines or json.loads(lines[0]).get("format") != "tuneforge-log":
            raise ValidationError(f"{path}: not a tuneforge log (its first line is not the log header)")
        version = json.loads(lines[0])["version"]
        response = self._call(self._db.Upload, database_pb2.UploadRequest(format_version=version, lines=lines[1:]),
                              f"uploading {path}")
        return json_format.MessageToDict(response, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)

    # Helpers.

    def _spec(self, trials: int, options: Dict[str, Any]) -> tuning_pb2.JobSpec:
        known = {"device_key", "policy", "seed", "target", "priority", "batch_size", "early_stop", "owner",
                 "flat_rounds", "scheduler"}  # the last two: jobs of several tasks (a model)
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValidationError(f"unknown job option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        if not isinstance(trials, int) or isinstance(trials, bool):
            raise ValidationError(f"trials must be an integer, got {trials!r}")
        spec = tuning_pb2.JobSpec(trials=trials, device_key=options.get("device_key", "local"))
        for key in known - {"device_key"}:
            if key in options:
                setattr(spec, key, options[key])
        return spec

    def _submit(self, spec: tuning_pb2.JobSpec) -> str:
        return self._call(self._tuning.SubmitJob, tuning_pb2.SubmitJobRequest(spec=spec), "submitting the job").job_id

    def _download(self, since_unix_us: int, until_unix_us: int):
        request = database_pb2.DownloadRequest(since_unix_us=since_unix_us, until_unix_us=until_unix_us)
        try:
            for chunk in self._db.Download(request, metadata=self._metadata):
                yield from chunk.lines
        except grpc.RpcError as e:
            raise _error(e, "downloading the log") from None
