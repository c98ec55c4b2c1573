"""Python client of a tuneforge server: submit tuning jobs (one task, or a model's
weighted tasks), watch and cancel them, and read the tuning log.

    import tuneforge
    client = tuneforge.Client("127.0.0.1:7070", token="...")
    job = client.submit_tasks({"matmul M=512 N=512 K=512": 2, "dense M=1 N=1000 K=512 bias=1 relu=0": 1},
                              trials=200, device_key="local")
    done = client.watch(job)
    for task in done["tasks"]:
        print(task["task"], task["best"]["gflops"])
"""
from tuneforge.client import (AuthError, Client, JobFailed, ServerUnavailable, TuneforgeError,
                              ValidationError, read_tasks)

__all__ = ["Client", "read_tasks", "TuneforgeError", "ServerUnavailable", "AuthError", "ValidationError",
           "JobFailed"]
