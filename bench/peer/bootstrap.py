"""A minimal Lambda runtime loop for Python handlers, as Lambda's Python runtime runs them.

Imports the handler module once (the init phase), then loops on the Lambda Runtime API named by
`AWS_LAMBDA_RUNTIME_API` (host:port): GET the next invocation, call the handler with the event
and a context, POST its result to `/response`, or an error document to `/error`. An import
failure is posted to `/runtime/init/error`.

Standard library only (`http.client`, the layer under `urllib.request`, on one kept-alive
connection as Lambda's runtime interface client keeps one), so the loop adds next to nothing to
what the handler itself costs.

    python bootstrap.py handler.lambda_handler
"""

import http.client
import importlib
import json
import os
import sys
import time
import traceback

API = "/2018-06-01/runtime"


class LambdaContext:
    """The attributes and method of the context Lambda's Python runtime passes."""

    def __init__(self, headers):
        self.aws_request_id = headers["Lambda-Runtime-Aws-Request-Id"]
        self.invoked_function_arn = headers.get("Lambda-Runtime-Invoked-Function-Arn", "")
        self._deadline_ms = int(headers.get("Lambda-Runtime-Deadline-Ms", "0"))
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None

    def get_remaining_time_in_millis(self):
        return max(self._deadline_ms - int(time.time() * 1000), 0)


class RuntimeApi:
    def __init__(self, address):
        host, _, port = address.partition(":")
        self.conn = http.client.HTTPConnection(host, int(port or 80))

    def request(self, method, path, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        return response, response.read()

    def next(self):
        response, body = self.request("GET", f"{API}/invocation/next")
        return response.headers, body  # case-insensitive, as HTTP header names are

    def respond(self, request_id, result):
        self.request("POST", f"{API}/invocation/{request_id}/response", json.dumps(result).encode())

    def error(self, path, exc):
        document = {
            "errorMessage": str(exc),
            "errorType": type(exc).__name__,
            "stackTrace": traceback.format_tb(exc.__traceback__),
        }
        headers = {"Lambda-Runtime-Function-Error-Type": "Unhandled"}
        self.request("POST", path, json.dumps(document).encode(), headers)


def main():
    api = RuntimeApi(os.environ["AWS_LAMBDA_RUNTIME_API"])
    module_name, _, function_name = sys.argv[1].rpartition(".")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except Exception as exc:  # the init phase failed: tell the runtime API, as Lambda's does
        api.error(f"{API}/init/error", exc)
        raise
    while True:
        headers, body = api.next()
        context = LambdaContext(headers)
        try:
            result = handler(json.loads(body), context)
        except Exception as exc:
            api.error(f"{API}/invocation/{context.aws_request_id}/error", exc)
            continue
        api.respond(context.aws_request_id, result)


if __name__ == "__main__":
    main()
