"""What a run does around its jobs: the start, success and error handlers, the command it was started
with, the failed jobs' reasons, the recorded DAG and the HTML report."""
