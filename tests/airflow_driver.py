"""Run one DAG with ``dag.test()`` and print its outcome as one JSON line (for test_airflow.py).

Run in a subprocess with ``AIRFLOW_HOME`` pointing at a migrated SQLite metadata
database where the DAG is serialized, so that the test process never imports Airflow
(its import sets up logging and a home folder of its own)::

    python airflow_driver.py DAG_FILE DAG_ID YYYY-MM-DD [--sigterm-on-write]

Prints ``RESULT {"state": ..., "tasks": {task_id: state}, "xcom": {task_id: value}}``.
``--sigterm-on-write`` sends the process SIGTERM from inside the first batch written
to an output file, as a worker's supervisor does when a task is killed mid-write.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time


def main(argv):
    dag_file, dag_id, day = argv[:3]
    if "--sigterm-on-write" in argv:
        from gpumine.adapters import sinks

        write = sinks.TableWriter.write

        def killed_write(self, batch):
            write(self, batch)  # the temporary file now holds part of the output
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs here; a task that ignored it would go on

        sinks.TableWriter.write = killed_write
    import pendulum

    spec = importlib.util.spec_from_file_location("dag_under_test", dag_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = next(value for value in vars(module).values()
               if getattr(value, "dag_id", None) == dag_id and hasattr(value, "test"))
    run = dag.test(logical_date=pendulum.parse(day))

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        tasks = {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}
        xcom = {x.task_id: x.value for x in session.query(XComModel).filter(
            XComModel.run_id == run.run_id, XComModel.key == "return_value")}
    print("RESULT " + json.dumps({"state": str(run.state), "tasks": tasks, "xcom": xcom}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
