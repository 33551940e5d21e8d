"""Silk's Python SDK: a program run's items, logs, frontier and fetches through the download
center (``silk_sdk.Run``), Scrapy on Silk (``silk_sdk.scrapy``), and the hub's API for
starting runs and running jobs with arguments (``silk_sdk.Hub``).

    import silk_sdk
    run = silk_sdk.Run.from_env()          # inside a worker of a program run
    run.enqueue([silk_sdk.new_request("https://shop.example/")])
    batch = run.lease(max=10, wait_ms=1000)
    for lease in batch.leases:
        page = run.fetch(lease.url)         # through Silk's download center (or any client)
        ...                                 # parse page.body
        run.push_items([{"url": lease.url, "title": "…"}])
        run.ack_one(lease, "done", requests=[silk_sdk.new_request(link) for link in links])
"""

from .client import Hub, Lease, Leases, Response, Run, SilkError, new_request

__all__ = ["Hub", "Lease", "Leases", "Response", "Run", "SilkError", "new_request"]
__version__ = "0.2.0"
