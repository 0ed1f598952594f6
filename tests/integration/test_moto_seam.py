"""moto is a dependency of our internals here: Step Functions' interpreter invokes Lambda through
boto3, and we serve those invocations in process by replacing moto's `LambdaBackend.invoke`. If an
upgrade of moto moves that seam, these tests fail loudly instead of runs silently hanging."""

import inspect
import json
from typing import Any

import boto3

from stepwise_local.stack import LocalStack
from tests.eventually import eventually


def test_moto_still_calls_the_method_we_replace() -> None:
    from moto.awslambda.responses import LambdaResponse
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    source = inspect.getsource(LambdaResponse.invoke)
    call = "function_name, qualifier, self.body, self.headers, response_headers"
    assert "self.backend.invoke(" in source and call in source
    assert "invoke" in LambdaSimpleBackend.__dict__
    assert "lambda_client.invoke(**parameters)" in inspect.getsource(lambda_eval_utils)
    # make_stop_execution_safe waits for the worker's `env`, set by its thread after start
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    assert "self.env.set_stop(" in inspect.getsource(ExecutionWorker)


def test_a_state_machine_task_reaches_our_handler_and_our_errors_keep_their_names(stack: LocalStack) -> None:
    sfn = boto3.client("stepfunctions")
    before = stack.lambdas.invocations["StepFunction"]
    definition = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": stack.resolver.arns["StepFunction"], "Payload.$": "$"},
                "OutputPath": "$.Payload",
                "Catch": [{"ErrorEquals": ["RunStateError"], "ResultPath": "$.caught", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    arn = sfn.create_state_machine(
        name="seam-probe", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/x"
    )["stateMachineArn"]
    # A run id that does not exist: the handler raises NotFound, which is not caught above…
    execution = sfn.start_execution(
        stateMachineArn=arn, input=json.dumps({"tenant_id": "t", "run_id": "run_missing"})
    )["executionArn"]

    def ended() -> dict[str, Any]:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
        assert described["status"] != "RUNNING", described
        return described

    described = eventually(ended, timeout=30, what="the execution to end")

    assert stack.lambdas.invocations["StepFunction"] == before + 1  # served in process
    assert described["status"] == "FAILED"
    assert described["error"] == "NotFound"  # the handler's exception class, as Lambda names it


def test_a_transaction_retried_with_its_token_is_applied_once(stack: LocalStack) -> None:
    """DynamoDB's ClientRequestToken (botocore sends the same one on each retry): a retry after the
    answer was lost succeeds and changes nothing, as in AWS; moto alone re-ran it and failed its
    conditions (issue 30's soak: POST /runs answered 409 run_exists for the run it had just made)."""
    import uuid

    import pytest
    from botocore.exceptions import ClientError

    ddb = boto3.client("dynamodb")
    table = f"tokens-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    put = {
        "Put": {
            "TableName": table,
            "Item": {"pk": {"S": "run"}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    count = {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": "counter"}},
            "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }

    ddb.transact_write_items(TransactItems=[put, count], ClientRequestToken="token-1")
    ddb.transact_write_items(TransactItems=[put, count], ClientRequestToken="token-1")  # the retry

    assert ddb.get_item(TableName=table, Key={"pk": {"S": "counter"}})["Item"]["n"] == {"N": "1"}
    with pytest.raises(ClientError) as mismatch:
        ddb.transact_write_items(TransactItems=[count], ClientRequestToken="token-1")
    assert mismatch.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    with pytest.raises(ClientError) as again:  # another token is another transaction: conditions hold
        ddb.transact_write_items(TransactItems=[put, count], ClientRequestToken="token-2")
    assert again.value.response["Error"]["Code"] == "TransactionCanceledException"
