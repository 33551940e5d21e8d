# A Scrapy spider over Silk's demo site (`silk demo-site`): one item per product page, every
# other page followed. With Silk's three settings lines (sdk/python/README.md) it runs as a
# program on the agents; bench/programs.sh and the Scrapy row of crates/silk/tests/fleet.rs
# run it. Start it with `scrapy crawl demo -a start_url=http://127.0.0.1:PORT/`.
import scrapy
from scrapy.linkextractors import LinkExtractor


class Demo(scrapy.Spider):
    name = "demo"

    def __init__(self, start_url=None, **kw):
        super().__init__(**kw)
        self.start_url = start_url

    async def start(self):
        yield scrapy.Request(self.start_url)

    def parse(self, response):
        if "/p/" in response.url:
            yield {"url": response.url, "title": response.css("h1.title::text").get()}
        for link in LinkExtractor(deny=[r"/calendar/", r"/private/"]).extract_links(response):
            yield response.follow(link.url, self.parse)
