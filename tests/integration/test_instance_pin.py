"""A request pinned to a daemon instance (PROTOCOL.md section 3, the
`instance` field ctxd-router adds): only that instance serves it."""


def test_request_pinned_to_another_instance_is_refused(client):
    me = client.ok("hello")["instance"]
    other = "0" * 32 if me != "0" * 32 else "1" * 32
    r = client.err("execute", "instance", code="x = 1", instance=other)
    assert me in r["message"]
    # nothing happened: no context was made for it
    assert [c["name"] for c in client.ok("ctx.list")["contexts"]] == []
    client.err("ctx.create", "instance", name="p", instance=other)
    client.err("ctx.create", "instance", name="p", instance=5)
    # the daemon's own instance (or none) is served as ever
    assert client.ok("ctx.create", name="p", instance=me)["ctx"]["name"] == "p"
    assert client.request("execute", ctx="p", code="1", instance=me)["status"] == "ok"
