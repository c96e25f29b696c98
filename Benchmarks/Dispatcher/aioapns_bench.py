"""aioapns (PyPI) pushing Live Activity notifications to the APNs simulator, for comparison.

  python3 aioapns_bench.py --port P --ca simulator.pem --key AuthKey.p8 --key-id K --team T --count N
Prints {"requests": N, "seconds": S, "non200": E}.
"""
import argparse, asyncio, json, time, uuid

from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection
import ssl


async def main(args):
    connection.APNsProductionClientProtocol.APNS_SERVER = "127.0.0.1"
    connection.APNsBaseClientProtocol.APNS_PORT = args.port
    connection.APNsProductionClientProtocol.APNS_PORT = args.port
    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["h2"])  # as aioapns does with a context of its own (nginx needs ALPN to speak HTTP/2)
    client = APNs(key=open(args.key).read(), key_id=args.key_id, team_id=args.team, topic=f"{args.bundle}.push-type.liveactivity",
                  use_sandbox=False, ssl_context=context, max_connections=args.connections)
    pad = "x" * max(0, args.size - 120)
    token = "ab" * 80
    non200 = 0
    sem = asyncio.Semaphore(args.concurrency)

    async def one(i):
        nonlocal non200
        message = {"aps": {"event": "update", "timestamp": 1795000000 + i, "content-state": {"sequence": i, "pad": pad}}}
        request = NotificationRequest(device_token=token, message=message, notification_id=str(uuid.uuid4()), priority=5,
                                      push_type=PushType.LIVEACTIVITY)
        async with sem:
            result = await client.send_notification(request)
        if not result.is_successful:
            non200 += 1

    await asyncio.gather(*(one(i) for i in range(200)))  # warm up
    non200 = 0
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(args.count)))
    print(json.dumps({"requests": args.count, "seconds": time.perf_counter() - start, "non200": non200}))


parser = argparse.ArgumentParser()
for name, kind, default in [("--port", int, None), ("--ca", str, None), ("--key", str, None), ("--key-id", str, None), ("--team", str, None),
                            ("--bundle", str, "com.example.bench"), ("--count", int, 5000), ("--size", int, 1024), ("--concurrency", int, 100),
                            ("--connections", int, 2)]:
    parser.add_argument(name, type=kind, default=default)
asyncio.run(main(parser.parse_args()))
