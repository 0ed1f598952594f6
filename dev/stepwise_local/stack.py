"""The local stack: template.yaml brought up in moto, in this process.

Tables, functions, routes and the state machine are read from template.yaml, never restated here, so
the two columns of DESIGN.md cannot drift apart. Step Functions executions run on moto's interpreter
(the real ASL) and their Lambda tasks reach our handlers through the seam in lambdas.py.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import secrets
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepwise.core.ids import valid_tenant
from stepwise_local.cfn_yaml import load_template
from stepwise_local.gateway import Gateway, Route
from stepwise_local.lambdas import (
    FunctionSpec,
    LocalLambdas,
    install_moto_seam,
    make_dynamodb_transactions_idempotent,
    make_dynamodb_writes_atomic,
    make_start_execution_atomic,
    make_stop_execution_safe,
    make_task_callbacks_safe,
)
from stepwise_local.queues import LocalQueues, mappings
from stepwise_local.websocket import SocketGateway, install_connections_api, websocket_api

if TYPE_CHECKING:
    from stepwise.runs.reconcile import Outcome
    from stepwise_local.persist import LocalState
    from stepwise_local.scheduler import Delivery, LocalScheduler

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
ACCOUNT = "123456789012"
REGION = "us-east-1"
STACK_NAME = "stepwise-local"
DEFAULT_KEY = "sk-local-dev"
DEFAULT_TENANT = "local"
# What a run whose execution the restart took away fails with (moto keeps executions in memory only).
RESTARTED = (
    "the local stack restarted while the run was in flight; Step Functions executions do not survive "
    "a restart of the local stack, so its execution was lost"
)

# Seconds between the local scheduler's ticks (EventBridge Scheduler fires to the minute); 0: never.
SCHEDULE_TICK_ENV = "STEPWISE_SCHEDULE_TICK_SECONDS"
SCHEDULE_TICK = 10.0

# The follow WebSocket API's loopback port (`make run` uses PORT + 1); unset: any free port.
FOLLOW_PORT_ENV = "STEPWISE_FOLLOW_PORT"
FOLLOW_URL_ENV = "STEPWISE_FOLLOW_URL"
# The loopback S3 endpoint presigned upload URLs point at (`make run` uses PORT + 2); unset: any port.
S3_PORT_ENV = "STEPWISE_LOCAL_S3_PORT"

# Parameters that shape the deployment and reach no function, so no variable sets them locally. Every
# other parameter is read from the variable its functions know it by (parameter_env).
DEPLOY_ONLY_PARAMETERS = frozenset(
    {
        "Stage",
        "AlarmEmail",
        "ApiThrottleRate",
        "ApiThrottleBurst",
        "StepReservedConcurrency",
        "UnknownRouteThrottleRate",
        "UnknownRouteThrottleBurst",
    }
)


def local_api_keys(environ: dict[str, str] | None = None) -> dict[str, str]:
    """key → tenant from STEPWISE_LOCAL_API_KEY (tenant `local`) and STEPWISE_LOCAL_API_KEYS."""
    env = os.environ if environ is None else environ
    keys = {env.get("STEPWISE_LOCAL_API_KEY") or DEFAULT_KEY: DEFAULT_TENANT}
    for pair in filter(None, (p.strip() for p in env.get("STEPWISE_LOCAL_API_KEYS", "").split(","))):
        key, sep, tenant = pair.rpartition(":")
        if not sep or not key or not tenant:
            raise ValueError(f"STEPWISE_LOCAL_API_KEYS entries are key:tenant, got {pair!r}")
        keys[key] = valid_tenant(tenant)  # refused at start, not at the first request
    return keys


class Resolver:
    """Just enough CloudFormation intrinsics for our template, with local physical ids."""

    def __init__(self, template: dict[str, Any], parameters: dict[str, str]) -> None:
        self.resources: dict[str, Any] = template.get("Resources", {})
        self.parameters = parameters
        self.physical: dict[str, str] = {}
        self.arns: dict[str, str] = {}

    def ref(self, name: str) -> str:
        if name in self.parameters:
            return self.parameters[name]
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::StackName": STACK_NAME,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::Partition": "aws",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.physical:
            return self.physical[name]
        logical, dot, attribute = name.partition(".")
        if dot and attribute == "Alias" and logical in self.arns:
            # SAM's `!Ref Function.Alias` (AutoPublishAlias) is the alias ARN. Locally there are no
            # versions: the qualifier rides along and LocalLambdas invokes the function itself.
            alias = self.resources[logical]["Properties"]["AutoPublishAlias"]
            return f"{self.arns[logical]}:{alias}"
        raise KeyError(f"Ref to {name} which the local stack has not created")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                logical, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                if attr == "Arn":
                    return self.arns[logical]
                return self.physical[logical]
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

                def sub(match: re.Match[str]) -> str:
                    name = match.group(1)
                    if name in extra:
                        return str(extra[name])
                    if "." in name:
                        return str(self.resolve({"Fn::GetAtt": name.split(".", 1)}))
                    return self.ref(name)

                return re.sub(r"\$\{([^}!]+)\}", sub, text)
            if key == "Fn::Join":
                sep, items = arg
                return sep.join(str(i) for i in self.resolve(items))
            if key == "Fn::If":
                return self.resolve(arg[1])  # conditions are deployment choices; take the first branch
        return {k: self.resolve(v) for k, v in value.items()}


AGENT_RUN = "AgentRunStateMachine"  # the template's machine that runs agents


@dataclass
class LocalStack:
    """A running local stack. Use `LocalStack.start()`; `stop()` undoes everything."""

    lambdas: LocalLambdas
    gateway: Gateway
    resolver: Resolver
    state_machine_arn: str
    api_keys: dict[str, str]
    scheduler: LocalScheduler  # fires the schedules in moto's EventBridge Scheduler
    sockets: SocketGateway | None  # the follow WebSocket API, on its own loopback port
    queues: LocalQueues  # Lambda's SQS pollers: WebhookQueue → WebhookFunction
    definition: str = ""  # the state machine's ASL, substitutions applied
    state: LocalState | None = None  # where the stack's state is remembered; None: memory only
    lost: list[Outcome] = field(default_factory=list)  # in-flight runs failed on start (execution_lost)
    _cleanup: list[Any] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        template_path: Path = TEMPLATE,
        *,
        schedule_tick: float | None = None,
        follow_port: int | None = None,
        state_dir: Path | None = None,
    ) -> LocalStack:
        """Bring the stack up. Due schedules fire every `schedule_tick` seconds (default
        $STEPWISE_SCHEDULE_TICK_SECONDS, else 10; 0 turns the ticker off: call `fire_due` instead).
        The WebSocket API listens on 127.0.0.1:`follow_port` (default $STEPWISE_FOLLOW_PORT, else any
        free port). With a `state_dir`, what the stack stores is restored from it before anything is
        served and saved to it after every change (persist.py); runs that were in flight when it
        stopped are failed `execution_lost` (`lost`). Without one, nothing outlives `stop()`; a
        StateError says why a directory cannot be used."""
        _fake_credentials()
        from moto import mock_aws

        from stepwise.store import wiring
        from stepwise_local import resolvers
        from stepwise_local.persist import LocalState

        wiring.install()  # the stack is an entry point too: DynamoDB's stores, in moto
        resolvers.per_thread()  # it serves requests on threads, which Lambda never does

        state = LocalState.open(state_dir) if state_dir is not None else None
        mock = mock_aws(
            config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
        )
        mock.start()
        try:
            if follow_port is None:
                follow_port = int(os.environ.get(FOLLOW_PORT_ENV) or 0)
            stack = _bring_up(load_template(template_path), mock, follow_port, state)
        except Exception:
            mock.stop()
            if state is not None:
                state.directory.close()
            raise
        if state is not None:
            try:
                stack._remember(state)
            except Exception:
                stack.stop()
                raise
        if schedule_tick is None:
            schedule_tick = float(os.environ.get(SCHEDULE_TICK_ENV) or SCHEDULE_TICK)
        stack.scheduler.interval = schedule_tick
        stack.scheduler.start()
        stack._cleanup.append(stack.scheduler.stop)  # cleanup runs backwards: the ticker stops first
        stack.queues.start()
        stack._cleanup.append(stack.queues.stop)
        return stack

    def _remember(self, state: LocalState) -> None:
        """Start saving, then settle what the restart took away: every run still active lost its
        execution, as the reconciler's sweep finds once an execution is missing in AWS."""
        from stepwise.runs import reconcile

        self.state = state
        self.scheduler.remember(state.fired)  # schedules go on from where they were, not from scratch
        state.start(self.scheduler)
        self._cleanup.append(state.close)  # runs before moto stops: the last save reads it
        if state.remembered:
            self.lost = reconcile.settle_lost(RESTARTED)

    def fire_due(self, now: datetime | None = None) -> list[Delivery]:
        """Deliver what EventBridge Scheduler would have delivered by `now` (default: the clock) and
        not delivered yet, to the schedules' targets, as Scheduler does."""
        return self.scheduler.fire_due(now)

    @contextmanager
    def redefined(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[None]:
        """Run with a changed state machine definition, then restore the real one (tests shorten
        retry intervals this way: moto's interpreter really waits them out)."""
        import boto3

        sfn = boto3.client("stepfunctions")
        changed = json.dumps(change(json.loads(self.definition)))
        sfn.update_state_machine(stateMachineArn=self.state_machine_arn, definition=changed)
        try:
            yield
        finally:
            sfn.update_state_machine(stateMachineArn=self.state_machine_arn, definition=self.definition)

    def stop(self) -> None:
        for undo in reversed(self._cleanup):
            undo()
        self._cleanup.clear()

    def invoke_api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = DEFAULT_KEY,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """A request through the gateway in process (no socket): status, headers, parsed body."""
        path_only, _, query = path.partition("?")
        hdrs = [(k, v) for k, v in (headers or {}).items()]
        if key is not None:
            hdrs.append(("authorization", f"Bearer {key}"))
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        if data:
            hdrs.append(("content-type", "application/json"))
        response = self.gateway.handle(method, path_only, query, hdrs, data)
        text = response.body.decode()
        parsed: Any = text
        if "json" in (response.header("content-type") or ""):
            parsed = json.loads(text) if text else None
        return response.status, {k.lower(): v for k, v in response.headers}, parsed


def _fake_credentials() -> None:
    # moto needs credentials to sign with; these keep a stray real profile from ever being used.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }.items():
        os.environ[name] = value
    os.environ.pop("AWS_PROFILE", None)


def parameter_env(template: dict[str, Any]) -> dict[str, str]:
    """Parameter → the environment variable the functions read it as: the `VAR: !Ref Param` entries of
    Globals and of every function. Read from the template, so a parameter added there is honoured by
    `make run` with no list here to keep in step."""
    parameters = template.get("Parameters", {})
    sources = [template.get("Globals", {}).get("Function", {})] + [
        res.get("Properties", {})
        for res in template.get("Resources", {}).values()
        if res.get("Type") == "AWS::Serverless::Function"
    ]
    mapping: dict[str, str] = {}
    for props in sources:
        for variable, value in (props.get("Environment") or {}).get("Variables", {}).items():
            if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in parameters:
                known = mapping.setdefault(value["Ref"], variable)
                if known != variable:
                    raise ValueError(
                        f"parameter {value['Ref']} reaches functions as both {known} and {variable}"
                    )
    return mapping


def _parameters(template: dict[str, Any]) -> dict[str, str]:
    """The template's parameters: from the developer's environment where set, else their defaults."""
    env_of = parameter_env(template)
    params = {}
    for name, spec in template.get("Parameters", {}).items():
        value = os.environ.get(env_of[name]) if name in env_of else None
        params[name] = str(value if value is not None else spec.get("Default", ""))
    return params


def _create_table(ddb: Any, name: str, props: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "TableName": name,
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        args["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    ddb.create_table(**args)
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)


# What SQS does locally as in AWS: how long a received message stays hidden, how long one is kept, and
# where one received too often goes. SSE and tags mean nothing to moto.
_QUEUE_ATTRIBUTES = ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "RedrivePolicy")


def _queue_attributes(props: dict[str, Any]) -> dict[str, str]:
    return {
        name: json.dumps(props[name]) if isinstance(props[name], dict) else str(props[name])
        for name in _QUEUE_ATTRIBUTES
        if name in props
    }


def _new_secret() -> str:
    return secrets.token_urlsafe(48)


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("app.py", "# served in process by stepwise_local.lambdas\n")
    return buf.getvalue()


def _bring_up(
    template: dict[str, Any], mock: Any, follow_port: int, state: LocalState | None = None
) -> LocalStack:
    import boto3

    from stepwise.approvals import links
    from stepwise.core import aws, config, credentials, tables
    from stepwise.store import keys
    from stepwise_local.scheduler import LocalScheduler

    resolver = Resolver(template, _parameters(template))
    resources = resolver.resources
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    lam, iam, sfn = boto3.client("lambda"), boto3.client("iam"), boto3.client("stepfunctions")

    for logical, res in resources.items():
        kind, props = res["Type"], res.get("Properties", {})
        if kind == "AWS::DynamoDB::Table":
            _create_table(ddb, logical, resolver.resolve(props))
            resolver.physical[logical] = logical
            resolver.arns[logical] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{logical}"
        elif kind == "AWS::SecretsManager::Secret":
            value = state.secret(logical, _new_secret) if state else _new_secret()
            secrets_manager = boto3.client("secretsmanager")
            arn = secrets_manager.create_secret(Name=f"{STACK_NAME}-{logical}", SecretString=value)["ARN"]
            resolver.physical[logical] = resolver.arns[logical] = arn
        elif kind == "AWS::KMS::Key":
            # The key policy is not applied: moto checks no permissions, and the policy names the account.
            description = str(resolver.resolve(props.get("Description", logical)))
            meta = boto3.client("kms").create_key(Description=description)["KeyMetadata"]
            resolver.physical[logical], resolver.arns[logical] = meta["KeyId"], meta["Arn"]
            if state is not None:  # the key it had before, or stored ciphertexts would not decrypt
                resolver.physical[logical], resolver.arns[logical] = state.kms_key(logical, meta["KeyId"])
        elif kind == "AWS::KMS::Alias":
            alias = resolver.resolve(props)
            boto3.client("kms").create_alias(AliasName=alias["AliasName"], TargetKeyId=alias["TargetKeyId"])
            resolver.physical[logical] = alias["AliasName"]
        elif kind == "AWS::Serverless::HttpApi" or kind == "AWS::ApiGatewayV2::Api":
            # The local servers' URLs are set once they listen. A WebSocket API's management endpoint
            # (https://local.execute-api...) is moto's, which install_connections_api serves.
            resolver.physical[logical] = "local"
        elif kind == "AWS::SQS::Queue":
            queues = boto3.client("sqs")
            url = queues.create_queue(
                QueueName=f"{STACK_NAME}-{logical}", Attributes=_queue_attributes(resolver.resolve(props))
            )["QueueUrl"]
            attributes = queues.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
            resolver.physical[logical], resolver.arns[logical] = url, attributes["QueueArn"]
        elif kind == "AWS::S3::Bucket":
            name = f"{STACK_NAME}-{logical}".lower()
            s3.create_bucket(Bucket=name)
            resolver.physical[logical] = name
            resolver.arns[logical] = f"arn:aws:s3:::{name}"
        elif kind == "AWS::Scheduler::ScheduleGroup":
            name = f"{STACK_NAME}-{logical}"
            group = boto3.client("scheduler").create_schedule_group(Name=name)
            resolver.physical[logical], resolver.arns[logical] = name, group["ScheduleGroupArn"]
        elif kind == "AWS::SSM::Parameter":
            # Locally the functions read the environment instead (STEPWISE_SECRETS=env); the parameter
            # exists so its name resolves as in AWS.
            parameter = resolver.resolve(props)
            boto3.client("ssm").put_parameter(
                Name=parameter["Name"], Type=parameter["Type"], Value=parameter["Value"], Overwrite=True
            )
            resolver.physical[logical] = parameter["Name"]
        elif kind == "AWS::IAM::Role":
            # Only its ARN matters locally (what Scheduler is told to act as): nothing checks policies.
            name = f"{STACK_NAME}-{logical}"
            trust = json.dumps(resolver.resolve(props.get("AssumeRolePolicyDocument", {})))
            created = iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)
            resolver.physical[logical], resolver.arns[logical] = name, created["Role"]["Arn"]

    if state is not None:
        state.restore(resolver.resources, resolver.physical, s3)

    role = iam.create_role(
        RoleName="stepwise-local",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    globals_fn = template.get("Globals", {}).get("Function", {})
    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    for logical in functions:
        resolver.physical[logical] = logical
        resolver.arns[logical] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical}"
    machines = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::StateMachine"}
    for logical, res in machines.items():
        name = resolver.resolve(res["Properties"].get("Name", logical))
        resolver.physical[logical] = resolver.arns[logical] = (
            f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
        )

    # Environment: the functions share one process, so their variables must agree.
    env: dict[str, str] = {}
    specs = []
    for logical, res in functions.items():
        props = res["Properties"]
        variables = {
            **globals_fn.get("Environment", {}).get("Variables", {}),
            **props.get("Environment", {}).get("Variables", {}),
        }
        for name, value in resolver.resolve(variables).items():
            if name in env and env[name] != str(value):
                raise ValueError(f"functions disagree on {name}; the local stack shares one environment")
            env[name] = str(value)
        specs.append(
            FunctionSpec(
                logical_id=logical,
                code_dir=ROOT / props["CodeUri"],
                handler=props["Handler"],
                timeout=int(props.get("Timeout", globals_fn.get("Timeout", 30))),
                memory=int(props.get("MemorySize", globals_fn.get("MemorySize", 512))),
                name=str(resolver.resolve(props["FunctionName"])) if "FunctionName" in props else None,
            )
        )
        lam.create_function(
            FunctionName=logical,
            Runtime="python3.12",
            Role=role,
            Handler=props["Handler"],
            Code={"ZipFile": _zip()},
            Timeout=int(props.get("Timeout", globals_fn.get("Timeout", 30))),
        )
    os.environ.update(env)
    # Presigned URLs (uploads) point at a loopback S3 endpoint in front of moto's S3, not at AWS.
    from stepwise.attachments import blobs
    from stepwise_local import s3 as local_s3

    s3_server = local_s3.serve("127.0.0.1", int(os.environ.get(S3_PORT_ENV) or 0))
    os.environ[blobs.LOCAL_S3_ENV] = s3_server.url
    blobs.reset()
    os.environ["STEPWISE_CHANNELS"] = "console"  # approval mail and Slack messages are printed
    # Deployment secrets stay environment variables locally (SLACK_SIGNING_SECRET, OPENAI_API_KEY, ...):
    # the template's Secrets Manager secrets hold only placeholders here.
    os.environ["STEPWISE_SECRETS"] = "env"
    # Approval links point at the local server; `make run` sets the port it actually bound.
    os.environ["STEPWISE_PUBLIC_URL"] = f"http://127.0.0.1:{os.environ.get('PORT', '3000')}"
    config.reset()
    credentials.reset()
    links.reset()  # the approval link secret is read once per process; this stack's may differ
    aws.reset()
    tables.rebind()

    lambdas = LocalLambdas(specs, lambda logical: resolver.arns[logical])
    lambdas.preload()
    # Modules the steps import on first use (same reason as preload): loaded once, before any thread.
    for module in (
        "stepwise.loop.compaction",
        "stepwise.mcp",
        "stepwise.runs.hooks",
        "stepwise.tools.http_tool",
    ):
        importlib.import_module(module)
    undo_seam = install_moto_seam(lambdas)
    undo_atomic = make_dynamodb_writes_atomic()
    undo_stop = make_stop_execution_safe()
    undo_callbacks = make_task_callbacks_safe()
    undo_starts = make_start_execution_atomic()
    undo_tokens = make_dynamodb_transactions_idempotent()

    # Every machine of the template (the agent run, the eval run); the agent run's is the one the stack
    # names (`state_machine_arn`, `definition`, `redefined`).
    state_machine_arn = definition = ""
    for logical, res in machines.items():
        props = res["Properties"]
        text = (ROOT / props["DefinitionUri"]).read_text()
        for name, value in resolver.resolve(props.get("DefinitionSubstitutions", {})).items():
            text = text.replace("${" + name + "}", str(value))
        arn = sfn.create_state_machine(
            name=resolver.physical[logical].rsplit(":", 1)[-1],
            definition=text,
            roleArn=role,
            type=props.get("Type", "STANDARD"),
        )["stateMachineArn"]
        if logical == AGENT_RUN or not state_machine_arn:
            state_machine_arn, definition = arn, text

    api_keys = local_api_keys()
    for key, tenant in api_keys.items():
        keys.store_key(key, tenant)

    socket_api = websocket_api(resources, resolver.resolve, lambdas.logical_id)
    sockets = undo_connections = None
    if socket_api is not None:
        sockets = SocketGateway(socket_api, lambdas.invoke, "127.0.0.1", follow_port)
        undo_connections = install_connections_api(sockets)
        os.environ[FOLLOW_URL_ENV] = sockets.url  # follow URLs point at the local socket server

    urls = {
        resolver.arns[k]: resolver.physical[k] for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue"
    }
    stack = LocalStack(
        queues=LocalQueues(mappings(functions, resolver.resolve, urls.__getitem__), lambdas.invoke),
        lambdas=lambdas,
        gateway=_gateway(resources, functions, lambdas.invoke, resolver.resolve),
        resolver=resolver,
        state_machine_arn=state_machine_arn,
        api_keys=api_keys,
        scheduler=LocalScheduler(lambdas.invoke, interval=0),
        sockets=sockets,
        definition=definition,
    )
    stack._cleanup.extend(
        [
            mock.stop,
            undo_seam,
            undo_atomic,
            undo_stop,
            undo_callbacks,
            undo_starts,
            undo_tokens,
            s3_server.shutdown,
        ]
    )
    if sockets is not None and undo_connections is not None:
        stack._cleanup.extend([undo_connections, sockets.stop])  # run backwards: sockets close first
    return stack


def _routes(functions: dict[str, Any]) -> list[Route]:
    routes = []
    for logical, res in functions.items():
        for event in (res["Properties"].get("Events") or {}).values():
            if event.get("Type") != "HttpApi":
                continue
            props = event.get("Properties", {})
            auth = (props.get("Auth") or {}).get("Authorizer")
            routes.append(
                Route(
                    method=props.get("Method", "ANY").upper(),
                    path=props["Path"],
                    function=logical,
                    authorized=auth != "NONE",
                )
            )
    return routes


def route_throttles(resources: dict[str, Any], resolve: Any) -> dict[str, tuple[float, float]]:
    """Route key → (rate, burst) from the HttpApi's RouteSettings, parameters resolved."""
    throttles: dict[str, tuple[float, float]] = {}
    for res in resources.values():
        if res["Type"] == "AWS::Serverless::HttpApi":
            settings = resolve(res.get("Properties", {}).get("RouteSettings") or {})
            for key, s in settings.items():
                if "ThrottlingRateLimit" in s and "ThrottlingBurstLimit" in s:
                    throttles[key] = (float(s["ThrottlingRateLimit"]), float(s["ThrottlingBurstLimit"]))
    return throttles


def _gateway(resources: dict[str, Any], functions: dict[str, Any], invoke: Any, resolve: Any) -> Gateway:
    """The HttpApi's routes behind its default Lambda authorizer, with the authorizer's identity
    sources and result TTL as the template sets them (SAM's defaults: no sources, TTL 300), and the
    per-route throttles of its RouteSettings (the catch-all's; the stage-wide default is not applied
    locally: tests send bursts no deployment would see from one client)."""
    throttles = route_throttles(resources, resolve)
    for res in resources.values():
        if res["Type"] != "AWS::Serverless::HttpApi":
            continue
        auth = res.get("Properties", {}).get("Auth", {})
        spec = auth.get("Authorizers", {}).get(auth.get("DefaultAuthorizer"), {})
        arn = spec.get("FunctionArn", {})
        if isinstance(arn, dict) and "Fn::GetAtt" in arn:
            target = arn["Fn::GetAtt"]
            identity = spec.get("Identity") or {}
            return Gateway(
                _routes(functions),
                invoke,
                authorizer=str(target[0] if isinstance(target, list) else target.split(".")[0]),
                identity_headers=tuple(identity.get("Headers") or ()),
                authorizer_ttl=float(identity.get("ReauthorizeEvery", 300)),
                throttles=throttles,
            )
    return Gateway(_routes(functions), invoke, authorizer=None, throttles=throttles)
