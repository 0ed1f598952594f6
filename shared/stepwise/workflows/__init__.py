"""Workflows: graphs of agents (sequential, parallel, map, loop, branch, approval) compiled to Step
Functions state machines. models: the definition; expressions: templates and conditions; checks: what
is validated at creation; compiler: the ASL; service: versions and quotas; running: the runs and the
workflow-node Lambda's tasks."""
