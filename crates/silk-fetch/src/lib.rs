//! `silk-fetch`: the downloader and the page parsing that runs near the data (on agents, and
//! inside `silk crawl`).
//!
//! - [`Fetcher`] ([`fetcher`]): one request in, one [`Response`] or [`FetchError`] out;
//!   pooled HTTP/1.1 and HTTP/2 over rustls, cookies per fetcher, proxies in rotation
//!   ([`ProxyPool`]), redirects returned rather than followed, hard time and size limits.
//! - [`decode_html`] ([`decode`]): the charset of a page and its text as UTF-8.
//! - [`Extractor`] ([`extract`]): links and item fields from a spider's rules, in one
//!   streaming pass where possible.
//! - [`RobotsCache`] ([`robots`]): robots.txt per host, fetched once, with crawl-delay.
//! - Under an [`AddressPolicy`] (`silk_core::net`), a fetcher reaches no private range it does
//!   not allow, checked on the addresses the connection is made to.
//!
//! This crate decides nothing about *what* to crawl: dedup, depth, allowed domains,
//! politeness and retries belong to the frontier and the crawl loop; this crate reports
//! (links, [`Retry`] classes, crawl delays) and they decide.

mod coding;
pub mod config;
pub mod decode;
mod entities;
pub mod error;
pub mod extract;
pub mod fetcher;
pub mod proxy;
pub mod robots;
pub mod verdict;

pub use config::FetchConfig;
pub use decode::{decode_html, decode_html_cow, sniff_encoding};
pub use error::{ErrorKind, FetchError, Retry};
pub use extract::{Extractor, Page, Wants};
pub use fetcher::{Fetch, Fetcher, Response};
pub use proxy::ProxyPool;
pub use robots::{Robots, RobotsCache, RobotsVerdict};
pub use silk_core::net::AddressPolicy;
pub use verdict::{Harvest, Verdict, harvest, judge, robots_verdict, wants};
