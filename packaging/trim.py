"""What `make package` leaves out of the layers: an explicit, reviewed list, each entry with its reason.

Lambda allows 250 MiB unzipped for a function and all its layers. StepFunction carries the core
layer, the model layer (litellm) and the stepwise layer: 262.8 MiB untrimmed, even with the model
layer leaving out what the core layer has, and the bytecode of what it loads (packaging/bytecode.py)
adds about 31 MiB. These rules take out what the runtime never imports or reads, and nothing a model
call can reach:

- data, stubs and scripts: the proxy's admin UI and API documents, the API models of AWS services no
  shipped code names and botocore's request examples (BOTOCORE_SERVICES below), `.pyi`, console scripts;
- code (`code=True`), each an explicit list of modules proven unloaded: the LiteLLM proxy server's own
  modules (PROXY_SERVER), googleapis-common-protos (GOOGLEAPIS) and OTLP's messages and exporters for
  metrics, logs and profiles (OTLP_OTHER_SIGNALS), SQLAlchemy's test harness and the dialects the
  database tools refuse (SQLALCHEMY_UNUSED), and SQLAlchemy's Cython accelerators, whose pure-Python
  modules ship beside them and load instead (SQLALCHEMY_ACCELERATORS: the only native modules a rule
  removes). Every build measures what the functions load and
  fails if a rule removed any of it; tests/unit/test_packaging.py exports a span through the OTLP
  exporter and fails if a rule removed a module that loads; no other rule may remove a `.py` or native
  module (the same test checks every file of every layer distribution, as installed in the venv, and
  every module stepwise imports);
- never litellm's offline data: the bundled cost map (LITELLM_LOCAL_MODEL_COST_MAP) and the tiktoken
  and tokenizer files it counts tokens with (KEEP below; the same test checks it), nor a provider of
  `litellm/llms/` (which one a deployment calls is its configuration);
- and `make package` (VERIFY=1, the default) applies the same rules to an x86_64 copy of the same
  pinned releases and imports every litellm module with and without them (packaging/verify.py).

Add a rule only with a measured size and a reason; a layer-specific rule that no longer matches
anything fails the build (a renamed directory must not silently stop being trimmed).

Standalone on purpose (stdlib only): the unit test loads it by path.
"""

from __future__ import annotations

import fnmatch
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    """Remove `pattern` (relative to a layer's `python/`) from the layers named in `layers`.

    A pattern ending in `/` removes matching directories with everything in them; any other pattern
    removes matching files. `fnmatch` syntax: `*` also matches `/`, so `*.pyi` matches at any depth.
    """

    pattern: str
    layers: tuple[str, ...]
    why: str
    code: bool = False  # removes modules: only what no function loads (checked by the build, below)
    # Directories (with a trailing `/`) the pattern must spare, and everything under them.
    unless: tuple[str, ...] = ()

    @property
    def is_dir(self) -> bool:
        return self.pattern.endswith("/")

    def matches(self, relpath: str, is_dir: bool) -> bool:
        if is_dir != self.is_dir:
            return False
        path = relpath + "/" if is_dir else relpath
        return fnmatch.fnmatchcase(path, self.pattern) and not path.startswith(self.unless)


ALL = ("core", "model", "stepwise")

# The LiteLLM proxy server's own code. Stepwise calls litellm as a library (completion, token counting,
# the cost map) and runs no proxy; none of this is loaded by any function (measured at every build:
# packaging/bytecode.py imports each handler module, and the model step's SnapStart init, scripted and
# OpenAI-compatible turns and token counts, and fails the build if a rule removed a file that loaded),
# and most of it cannot be imported on Lambda at all: it needs FastAPI (and orjson, websockets, ...),
# which no layer ships. `make package` VERIFY=1 imports every remaining litellm module with and without
# these rules: one that imported before must still import (which keeps auth/ and middleware/: proxy
# modules that import without FastAPI need them). Sizes: MiB of litellm 1.110.2; n/m: modules
# that fail to import untrimmed (no FastAPI) / modules.
PROXY_SERVER: dict[str, str] = {
    "management_endpoints/": "2.5 MiB, 60/65: the admin API (keys, teams, users, budgets)",
    "guardrails/guardrail_hooks/": (
        "2.5 MiB, 91/142: the guardrail vendors' hooks, each loaded only when configured (Stepwise "
        "configures none; guardrails/ itself stays: litellm's guardrail base class loads exception_utils)"
    ),
    "pass_through_endpoints/": "0.9 MiB, 16/32: the proxy's provider pass-through routes and their logging",
    "hooks/": "0.7 MiB, 27/28: proxy request hooks (rate limits, budgets, caching of keys)",
    "client/": "0.5 MiB, 6/45: the proxy's command-line client",
    "management_helpers/": "0.3 MiB, 18/24: helpers of the admin API",
    "agent_endpoints/": "0.3 MiB, 11/17: the proxy's agent registry routes",
    "policy_engine/": "0.2 MiB, 10/12: guardrail policies of the proxy",
    "management/": "5/10: helpers of the admin UI",
    "proxy_server.py": "0.9 MiB, the server itself (needs FastAPI and websockets)",
    "utils.py": "0.5 MiB, the server's ProxyLogging and database plumbing (needs FastAPI)",
    "common_request_processing.py": "0.2 MiB, the server's request pipeline (needs orjson)",
    "litellm_pre_call_utils.py": "0.2 MiB, the server's per-request setup (needs FastAPI)",
    "route_llm_request.py": "the server's router dispatch (needs FastAPI)",
    "proxy_cli.py": "the `litellm` proxy command",
}
# The server's remaining HTTP route modules, 1.3 MiB together, each of them (nearly) all FastAPI.
# openai_files_endpoints/ is not here: `import litellm` loads one of its modules.
PROXY_ROUTES = (
    "alerting", "analytics", "anthropic", "batches", "config_management", "container", "credential",
    "decisions", "discovery", "fine_tuning", "google", "health", "image", "logging", "ocr", "openai_evals",
    "public", "rag", "realtime", "rerank", "response_api", "search", "ui_crud", "vector_store",
    "vector_store_files", "vertex_ai", "video",
)  # fmt: skip

# googleapis-common-protos (0.6 MiB): opentelemetry-exporter-otlp-proto-http requires it, but the exporter
# imports none of it (it posts OTLP protobuf and reads only the HTTP status; measured: exporting a span
# loads no module of these, tests/unit/test_packaging.py), and the only other importers (litellm's Vertex
# and Google KMS helpers, pydantic-settings' GCP source) need google-cloud-* packages no layer ships.
GOOGLEAPIS = ("api", "cloud", "gapic", "logging", "longrunning", "rpc", "type")
# OpenTelemetry's OTLP parts for signals other than traces (0.1 MiB): Stepwise exports spans only (stepwise
# tracing builds its TracerProvider itself; the SDK's auto-configuration, which would look the metric and
# log exporters up by entry point, never runs). The `_grpc` stubs need grpcio, which no layer ships.
OTLP_OTHER_SIGNALS: dict[str, str] = {
    "opentelemetry/proto/logs/": "log records' messages",
    "opentelemetry/proto/metrics/": "metrics' messages",
    "opentelemetry/proto/profiles/": "profiles' messages",
    "opentelemetry/proto/collector/logs/": "the logs service's request and response",
    "opentelemetry/proto/collector/metrics/": "the metrics service's request and response",
    "opentelemetry/proto/collector/profiles/": "the profiles service's request and response",
    "opentelemetry/proto/collector/trace/v1/trace_service_pb2_grpc.py": "the trace service's gRPC stub",
    "opentelemetry/exporter/otlp/proto/common/_internal/_log_encoder/": "the log encoder",
    "opentelemetry/exporter/otlp/proto/common/_internal/metrics_encoder/": "the metrics encoder",
    "opentelemetry/exporter/otlp/proto/common/_log_encoder.py": "the log encoder's public name",
    "opentelemetry/exporter/otlp/proto/common/metrics_encoder.py": "the metrics encoder's public name",
    "opentelemetry/exporter/otlp/proto/http/_log_exporter/": "the OTLP/HTTP log exporter",
    "opentelemetry/exporter/otlp/proto/http/metric_exporter/": "the OTLP/HTTP metric exporter",
}
# SQLAlchemy (core layer: the database tools) beyond what they can reach. The tools refuse every URL
# but sqlite, postgresql and mysql before an engine exists (stepwise.tools.builtin._db_target: FLAVORS),
# so no other dialect is ever loaded; SQLAlchemy's test harness is loaded only by its own pytest plugin
# (and the dialects' provision.py modules, which only that plugin imports).
SQLALCHEMY_UNUSED: dict[str, str] = {
    "sqlalchemy/testing/": "0.8 MiB: SQLAlchemy's test harness and pytest plugin",
    "sqlalchemy/dialects/mssql/": "0.2 MiB: the SQL Server dialect, a backend the tools refuse",
    "sqlalchemy/dialects/oracle/": "0.3 MiB: the Oracle dialect, a backend the tools refuse",
}
# SQLAlchemy's Cython accelerators (10.1 MiB of aarch64 native code): each is compiled from the pure-
# Python module that ships next to it (`engine/_result_cy.py` beside `engine/_result_cy.cpython-312-
# aarch64-linux-gnu.so`), which Python imports instead when the .so is absent: the same code,
# interpreted (SQLAlchemy reports it as `HAS_CYEXTENSION = False` and runs). The database tools run one
# statement per tool call, where the accelerators' speed does not show; the model step's 250 MiB does.
# tests/unit/test_packaging.py runs queries with these modules loaded from their .py files.
SQLALCHEMY_ACCELERATORS = (
    "engine/_processors_cy", "engine/_result_cy", "engine/_row_cy", "engine/_util_cy",
    "sql/_cache_key_cy", "sql/_util_cy", "util/_collections_cy", "util/_immutabledict_cy",
)  # fmt: skip
# The AWS services whose botocore models stay (botocore/data/<service>/): every service that any code a
# layer ships names in a string literal (stepwise's clients; litellm's Bedrock, SageMaker, STS, KMS,
# secret managers and loggers; Powertools' utilities; botocore's own STS/SSO credential and token
# providers), a deliberately loose superset: a word in a docstring that happens to be a service name keeps
# that service too. tests/unit/test_packaging.py scans every .py of every layer distribution and of
# stepwise and fails when one names a service missing here. A client for any other service would fail
# at creation (UnknownServiceError); nothing in Stepwise takes a service name from configuration.
BOTOCORE_SERVICES = (
    "account", "amp", "apigatewaymanagementapi", "appconfig", "appconfigdata", "appsync", "artifact",
    "athena", "backup", "batch", "bedrock", "bedrock-agent", "bedrock-agent-runtime", "bedrock-agentcore",
    "bedrock-runtime", "billing", "budgets", "chatbot", "cloudwatch", "comprehendmedical", "config",
    "connect", "cur", "dax", "discovery", "dynamodb", "ec2", "elasticache", "elb", "es", "events",
    "forecast", "glacier", "health", "iam", "inspector", "kafka", "kinesis", "kms", "lambda", "location",
    "logs", "m2", "mpa", "notifications", "opensearch", "opensearchserverless", "organizations", "pi",
    "pipes", "polly", "pricing", "ram", "rds", "redshift", "s3", "s3vectors", "sagemaker",
    "sagemaker-runtime", "scheduler", "schemas", "secretsmanager", "ses", "sesv2", "shield", "signin",
    "sns", "sqs", "ssm", "sso", "sso-oidc", "stepfunctions", "sts", "support", "transcribe", "transfer",
    "translate",
)  # fmt: skip

RULES: tuple[Rule, ...] = (
    Rule(
        "litellm/proxy/_experimental/out/",
        ("model",),
        "~20 MB: the LiteLLM proxy's admin UI, a static Next.js build served only by proxy_server.py",
    ),
    Rule(
        "litellm/proxy/swagger/",
        ("model",),
        "~1.7 MB: Swagger UI assets the proxy server serves at /docs",
    ),
    Rule(
        "litellm/proxy/_lazy_openapi_snapshot.json",
        ("model",),
        "~2.1 MB: the proxy server's OpenAPI document, read only by litellm/proxy/_lazy_openapi_snapshot.py",
    ),
    *(Rule(f"litellm/proxy/{path}", ("model",), why, code=True) for path, why in PROXY_SERVER.items()),
    *(
        Rule(f"litellm/proxy/{name}_endpoints/", ("model",), "HTTP routes of the proxy server", code=True)
        for name in PROXY_ROUTES
    ),
    *(
        Rule(
            f"google/{name}/", ("core",), "googleapis-common-protos: no shipped module imports it", code=True
        )
        for name in GOOGLEAPIS
    ),
    *(
        Rule(path, ("core",), f"OTLP {what}: Stepwise exports traces only", code=True)
        for path, what in OTLP_OTHER_SIGNALS.items()
    ),
    *(
        Rule(path, ("core",), f"{why} (no function can load it)", code=True)
        for path, why in SQLALCHEMY_UNUSED.items()
    ),
    *(
        Rule(
            f"sqlalchemy/{name}.*.so",
            ("core",),
            "a Cython accelerator: its pure-Python module ships beside it and is imported instead",
            code=True,
        )
        for name in SQLALCHEMY_ACCELERATORS
    ),
    Rule(
        "botocore/data/*/",
        ("core",),
        "~10 MiB: the API models of the AWS services no shipped code names (BOTOCORE_SERVICES above)",
        unless=tuple(f"botocore/data/{service}/" for service in BOTOCORE_SERVICES),
    ),
    Rule(
        "botocore/data/*/examples-1.json",
        ("core",),
        "~1.6 MiB: request examples, read only by botocore.docs and boto3.docs to write documentation",
    ),
    Rule("bin/", ALL, "console scripts pip wrote for the build machine's interpreter; Lambda runs none"),
    Rule("*.pyi", ALL, "type stubs: read by type checkers, never by the interpreter"),
)

# Distributions of a layer's closure that are not installed at all, with the reason. The layer's
# requirements file still pins them (the lock and the local venv keep them).
SKIP_DISTS: dict[str, str] = {
    "hf-xet": (
        "~11 MB native library: huggingface_hub's Xet storage backend, used only to download files "
        "from the Hugging Face Hub, which a Lambda with egress to model APIs only never does; "
        "huggingface_hub imports it lazily and treats it as optional"
    ),
}

# Data (relative to python/) the rules must never remove: files a model call reads at run time. Code
# needs no list: tests/unit/test_packaging.py checks that no rule removes any .py or native module.
KEEP: tuple[str, ...] = (
    "litellm/model_prices_and_context_window_backup.json",  # the cost map, read offline
    "litellm/litellm_core_utils/tokenizers/",  # tiktoken encodings and tokenizer JSON, read offline
    "litellm/llms/huggingface/huggingface_llms_metadata/",  # the huggingface provider's model lists
)


@dataclass
class Trimmed:
    layer: str
    removed_bytes: int = 0
    removed_files: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)  # pattern -> bytes removed


def rules_for(layer: str) -> list[Rule]:
    return [rule for rule in RULES if layer in rule.layers]


def removed_by(relpath: str, layer: str, is_dir: bool = False) -> Rule | None:
    """The rule that removes `relpath` (or one of its parent directories) from `layer`, if any."""
    parts = relpath.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        prefix_is_dir = depth < len(parts) or is_dir
        for rule in rules_for(layer):
            if rule.matches(prefix, prefix_is_dir):
                return rule
    return None


def trim(root: Path, layer: str) -> Trimmed:
    """Apply the rules to the tree at `root` (a layer's `python/`, or a copy of one) in place."""
    done = Trimmed(layer, by_rule={rule.pattern: 0 for rule in rules_for(layer)})
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts)):
        if not path.exists() and not path.is_symlink():
            continue  # inside a directory already removed
        relpath = path.relative_to(root).as_posix()
        is_dir = path.is_dir() and not path.is_symlink()
        rule = next((r for r in rules_for(layer) if r.matches(relpath, is_dir)), None)
        if rule is None:
            continue
        files = [p for p in path.rglob("*") if p.is_file()] if is_dir else [path]
        size = sum(p.stat().st_size for p in files)
        shutil.rmtree(path) if is_dir else path.unlink()
        done.removed_bytes += size
        done.removed_files += len(files)
        done.by_rule[rule.pattern] += size
    return done


def unused_rules(results: list[Trimmed]) -> list[str]:
    """Layer-specific rules that removed nothing in any layer: stale, so the build stops."""
    used = {pattern for r in results for pattern, size in r.by_rule.items() if size}
    targeted = [rule for rule in RULES if rule.layers != ALL]
    return [rule.pattern for rule in targeted if rule.pattern not in used]
