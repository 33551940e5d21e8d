//! Integration tests of the agent runtime, driving agents through the bus as the hub will.
//! One test binary (modules below) to keep link time down.

mod allocation;
mod basics;
mod bus_down;
mod detach;
mod logs;
mod nats;
mod persistence;
mod proxies;
mod reply_to;
mod robots;
mod support;
mod trimming;
