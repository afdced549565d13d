"""serve.py's replacements of moto code: the same answers as moto's, at a cost that does not grow
with the queue or the table (counted in walks of the queue and reads of the whole table, not
timed).

    "$(infra/tools.sh path moto)" -m unittest discover -s infra/local -p 'test_*.py'
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# In process, under moto's mock: a custom endpoint would send these requests to a real server.
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402
from moto.dynamodb.models.table import Table  # noqa: E402
from moto.sqs import models as sqs_models  # noqa: E402

import serve  # noqa: E402

serve.install_item_level_rollback()
serve.install_sqs_costs_by_batch()
serve.install_query_by_partition()

WALKS = {"queue": 0, "table": 0}


def counting_walk(prop):
    def get(self):
        WALKS["queue"] += 1
        return prop.fget(self)

    return property(get)


# Each approximate count walks every message of the queue: count the walks.
for _name in (
    "approximate_number_of_messages",
    "approximate_number_of_messages_not_visible",
    "approximate_number_of_messages_delayed",
):
    setattr(sqs_models.Queue, _name, counting_walk(getattr(sqs_models.Queue, _name)))

_all_items = Table.all_items


def counting_all_items(self):
    WALKS["table"] += 1
    return _all_items(self)


Table.all_items = counting_all_items


@mock_aws
class Sqs(unittest.TestCase):
    def setUp(self):
        self.sqs = boto3.client("sqs", region_name="us-east-1")
        dlq = self.sqs.create_queue(QueueName="dlq")["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
        self.dlq = dlq
        self.url = self.sqs.create_queue(QueueName="q", Attributes={"RedrivePolicy": redrive})["QueueUrl"]

    def send(self, n, prefix="m"):
        for start in range(0, n, 10):
            entries = [{"Id": str(i), "MessageBody": f"{prefix}{start + i}"} for i in range(min(10, n - start))]
            self.sqs.send_message_batch(QueueUrl=self.url, Entries=entries)

    def receive(self, url=None, n=10, visibility=30):
        out = self.sqs.receive_message(QueueUrl=url or self.url, MaxNumberOfMessages=n, VisibilityTimeout=visibility)
        return out.get("Messages", [])

    def test_send_receive_and_delete_never_walk_the_queue(self):
        self.send(300)
        WALKS["queue"] = 0
        self.send(10, prefix="late")
        got = self.receive()
        self.sqs.delete_message_batch(
            QueueUrl=self.url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        )
        arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"]
        self.assertEqual(len(got), 10)
        self.assertTrue(arn["QueueArn"].endswith(":q"))
        self.assertEqual(WALKS["queue"], 0)
        # Asked for, the counts still walk, and are right.
        counts = self.sqs.get_queue_attributes(
            QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        self.assertEqual(counts, {"ApproximateNumberOfMessages": "300", "ApproximateNumberOfMessagesNotVisible": "0"})

    def test_receive_hands_out_visible_messages_in_order_and_skips_those_in_flight(self):
        self.send(3)
        first = [m["Body"] for m in self.receive(n=2)]
        second = [m["Body"] for m in self.receive(n=2)]
        self.assertEqual((first, second), (["m0", "m1"], ["m2"]))
        self.assertEqual(self.receive(), [])

    def test_delete_by_any_handle_the_message_had_once_and_refuse_unknown_handles(self):
        self.send(2)
        old = self.receive(n=1, visibility=0)[0]["ReceiptHandle"]
        current = self.receive(n=1, visibility=30)[0]
        self.assertEqual(current["Body"], "m0")
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=old)
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=current["ReceiptHandle"])  # a second delete is fine
        with self.assertRaises(self.sqs.exceptions.ReceiptHandleIsInvalid):
            self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle="not-a-handle")
        self.assertEqual([m["Body"] for m in self.receive()], ["m1"])

    def test_a_message_received_max_receive_count_times_moves_to_the_dlq(self):
        self.send(1)
        for _ in range(2):
            self.assertEqual(len(self.receive(visibility=0)), 1)
        self.assertEqual(self.receive(), [])
        self.assertEqual([m["Body"] for m in self.receive(url=self.dlq)], ["m0"])

    def test_a_fifo_queue_still_deduplicates_by_content_and_holds_a_group_back(self):
        url = self.sqs.create_queue(
            QueueName="f.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        for body, group in (("a1", "a"), ("a1", "a"), ("a2", "a"), ("b1", "b")):
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)
        first = self.receive(url=url, n=1)
        self.assertEqual([m["Body"] for m in first], ["a1"])
        # Group a is in flight: only group b is handed out, and the duplicate a1 was dropped.
        self.assertEqual([m["Body"] for m in self.receive(url=url)], ["b1"])
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ContentBasedDeduplication"])
        self.assertEqual(attributes["Attributes"], {"ContentBasedDeduplication": "true"})

    def test_named_attributes_only_and_all(self):
        named = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["VisibilityTimeout", "FifoQueue"])
        self.assertEqual(named["Attributes"], {"VisibilityTimeout": "30"})
        every = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["All"])["Attributes"]
        self.assertEqual(json.loads(every["RedrivePolicy"])["maxReceiveCount"], 2)
        self.assertIn("ApproximateNumberOfMessages", every)


@mock_aws
class Query(unittest.TestCase):
    def test_a_query_reads_its_partition_only(self):
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for pk in ("a", "b", "c"):
            for sk in ("3", "1", "2"):
                ddb.put_item(TableName="t", Item={"pk": {"S": pk}, "sk": {"S": sk}})
        WALKS["table"] = 0
        out = ddb.query(
            TableName="t",
            KeyConditionExpression="pk = :pk AND sk > :sk",
            ExpressionAttributeValues={":pk": {"S": "b"}, ":sk": {"S": "1"}},
        )
        self.assertEqual([(i["pk"]["S"], i["sk"]["S"]) for i in out["Items"]], [("b", "2"), ("b", "3")])
        page = ddb.query(
            TableName="t",
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "c"}},
            Limit=2,
        )
        rest = ddb.query(
            TableName="t",
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "c"}},
            ExclusiveStartKey=page["LastEvaluatedKey"],
        )
        self.assertEqual([i["sk"]["S"] for i in page["Items"] + rest["Items"]], ["1", "2", "3"])
        self.assertEqual(WALKS["table"], 0)
        none = ddb.query(TableName="t", KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "z"}})
        self.assertEqual(none["Items"], [])


class KeepAlive(unittest.TestCase):
    """The server keeps a client's connection open between requests (HTTP/1.1), as DynamoDB's
    endpoints do, and still serves each request whole."""

    def setUp(self):
        import logging
        import threading

        logging.getLogger("werkzeug").setLevel(logging.WARNING)

        from werkzeug.serving import make_server

        apps = {}

        def app(environ, start_response):
            body = environ["wsgi.input"].read()
            apps.setdefault("bodies", []).append(body)
            payload = json.dumps({"echo": body.decode(), "path": environ["PATH_INFO"]}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [payload]

        self.bodies = apps
        self.server = make_server("127.0.0.1", 0, serve.Serialized(app), threaded=True,
                                  request_handler=serve.KeepAliveRequestHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.shutdown)

    def test_two_requests_on_one_connection_each_with_its_own_body(self):
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        self.addCleanup(conn.close)
        conn.request("POST", "/a", body=b'{"n":1}', headers={"Content-Type": "application/json"})
        first = conn.getresponse()
        self.assertEqual(json.loads(first.read()), {"echo": '{"n":1}', "path": "/a"})
        self.assertIsNone(first.getheader("Connection"))
        sock = conn.sock
        conn.request("POST", "/b", body=b'{"n":2}')
        second = conn.getresponse()
        self.assertEqual(json.loads(second.read()), {"echo": '{"n":2}', "path": "/b"})
        self.assertIs(conn.sock, sock)  # the same connection served both
        self.assertEqual(self.bodies["bodies"], [b'{"n":1}', b'{"n":2}'])
        self.assertGreaterEqual(serve.REQUESTS.get("http:POST /b", 0), 1)  # still counted

    def test_a_client_asking_to_close_gets_its_connection_closed(self):
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        self.addCleanup(conn.close)
        conn.request("GET", "/c", headers={"Connection": "close"})
        response = conn.getresponse()
        self.assertEqual(json.loads(response.read())["path"], "/c")
        self.assertEqual(response.getheader("Connection"), "close")


class Guards(unittest.TestCase):
    """What keeps other programs of this machine, web pages in a browser above all, out of the
    local AWS: no CORS, loopback Host names only, and no state changed by a GET."""

    def setUp(self):
        from werkzeug.test import Client

        self.client = Client(serve.make_app())

    def dynamodb(self, host="127.0.0.1:4566", **headers):
        return self.client.post(
            "/",
            data=b"{}",
            headers={"Host": host, "X-Amz-Target": "DynamoDB_20120810.ListTables",
                     "Content-Type": "application/x-amz-json-1.0",
                     "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request",
                     **headers},
        )

    def test_no_origin_gets_cors_headers_from_a_preflight_or_a_request(self):
        origin = "http://attacker.example"
        preflight = self.client.options("/", headers={
            "Host": "127.0.0.1:4566", "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-amz-target,content-type"})
        answered = self.dynamodb(Origin=origin)
        self.assertEqual(answered.status_code, 200, answered.get_data(as_text=True))
        self.assertIn("TableNames", answered.get_json(force=True))
        for response in (preflight, answered):
            cors = [h for h in response.headers.keys() if h.lower().startswith("access-control-")]
            self.assertEqual(cors, [], f"{response.status}: {response.headers}")

    def test_a_request_naming_another_host_is_refused_unserved(self):
        serve.REQUESTS.clear()
        for host in ("attacker.example:4566", "attacker.example", "127.0.0.1.attacker.example:4566",
                     "localhost.attacker.example", "10.0.0.1:4566", ""):
            refused = self.dynamodb(host=host)
            self.assertEqual(refused.status_code, 403, host)
        self.assertEqual(serve.REQUESTS, {}, "a refused request reached moto")
        for host in ("127.0.0.1:4566", "localhost:4566", "LOCALHOST:4566", "[::1]:4566", "127.0.0.1:45001"):
            self.assertEqual(self.dynamodb(host=host).status_code, 200, host)
        self.assertEqual(serve.REQUESTS, {"dynamodb:ListTables": 5})

    def test_the_counter_reset_takes_post_only_and_the_reads_get_only(self):
        serve.REQUESTS.clear()
        self.dynamodb()
        host = {"Host": "127.0.0.1:4566"}
        got = self.client.get("/_local-aws/requests/reset", headers=host)
        self.assertEqual((got.status_code, got.headers.get("Allow")), (405, "POST"))
        self.assertEqual(self.client.get("/_local-aws/requests", headers=host).get_json()["requests"],
                         {"dynamodb:ListTables": 1}, "a GET reset the counters")
        self.assertEqual(self.client.post("/_local-aws/requests", headers=host).status_code, 405)
        self.assertEqual(self.client.post("/_local-aws/requests/reset", headers=host).get_json(), {"reset": True})
        self.assertEqual(self.client.get("/_local-aws/requests", headers=host).get_json()["requests"], {})
        self.assertEqual(self.client.get("/_local-aws/health", headers=host).status_code, 200)

    def test_the_latency_takes_post_only_and_holds_dynamodb_requests(self):
        import time

        host = {"Host": "127.0.0.1:4566"}
        self.addCleanup(lambda: serve.LATENCY.update(dynamodb_ms=0))
        self.assertEqual(self.client.get("/_local-aws/latency?ms=50", headers=host).status_code, 405)
        for bad in ("", "?ms=", "?ms=-1", "?ms=x", "?ms=60001"):
            self.assertEqual(self.client.post("/_local-aws/latency" + bad, headers=host).status_code, 400, bad)
        self.assertEqual(serve.LATENCY["dynamodb_ms"], 0)
        self.assertEqual(self.client.post("/_local-aws/latency?ms=50", headers=host).get_json(),
                         {"dynamodb_latency_ms": 50})
        started = time.monotonic()
        self.assertEqual(self.dynamodb().status_code, 200)
        self.assertGreaterEqual(time.monotonic() - started, 0.05)
        started = time.monotonic()
        self.assertEqual(self.client.get("/_local-aws/health", headers=host).status_code, 200)
        self.assertLess(time.monotonic() - started, 0.05, "our own routes are not held")
        self.client.post("/_local-aws/latency?ms=0", headers=host)
        self.assertEqual(serve.LATENCY["dynamodb_ms"], 0)


class WriteUnits(unittest.TestCase):
    """The modelled write units of docs/cost-model.md, from the request alone."""

    def test_transaction_actions_cost_two_units_each_and_one_when_cancelled(self):
        small = {"id": {"S": "payments#e1"}, "n": {"N": "1500"}}
        big = {"id": {"S": "k"}, "blob": {"S": "x" * 1500}}
        tx = json.dumps({"TransactItems": [
            {"Put": {"TableName": "t", "Item": small}},
            {"Put": {"TableName": "t", "Item": big}},
            {"Update": {"TableName": "t", "Key": {"id": {"S": "b"}}}},
            {"ConditionCheck": {"TableName": "t", "Key": {"id": {"S": "c"}}}},
        ]}).encode()
        self.assertEqual(serve.write_units_of("dynamodb:TransactWriteItems", tx), 2 * (1 + 2 + 1 + 1))
        self.assertEqual(serve.write_units_of("dynamodb:TransactWriteItems", tx, cancelled=True), 1 + 2 + 1 + 1)

    def test_single_writes_and_reads(self):
        put = json.dumps({"TableName": "t", "Item": {"id": {"S": "a"}}}).encode()
        self.assertEqual(serve.write_units_of("dynamodb:PutItem", put), 1)
        self.assertEqual(serve.write_units_of("dynamodb:UpdateItem", b"{}"), 1)
        self.assertEqual(serve.write_units_of("dynamodb:GetItem", b"{}"), 0)


if __name__ == "__main__":
    unittest.main()
