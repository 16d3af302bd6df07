//! `info`: every GPU adapter with the limits that matter to memory.

use std::process::ExitCode;

use anyhow::Result;
use vrampool::fmt_bytes;

use crate::{Common, device};

/// Lists the adapters (`vrampool info`).
pub fn command(c: &Common) -> Result<ExitCode> {
    if c.simulate {
        usage!("info lists real adapters; --simulate has none to list");
    }
    let all = device::info(c.hints())?;
    if c.json {
        outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    for a in all {
        outln!("[{}] {} — {} {}", a.index, a.name, a.backend, a.device_type);
        outln!(
            "    driver                     {} {}",
            a.driver,
            a.driver_info
        );
        outln!(
            "    max_buffer_size            {} ({})",
            a.max_buffer_size,
            fmt_bytes(a.max_buffer_size)
        );
        outln!(
            "    max storage binding        {} ({})",
            a.max_storage_buffer_binding_size,
            fmt_bytes(a.max_storage_buffer_binding_size)
        );
        outln!(
            "    max uniform binding        {} ({})",
            a.max_uniform_buffer_binding_size,
            fmt_bytes(a.max_uniform_buffer_binding_size)
        );
        outln!(
            "    offset alignment           storage {} B, uniform {} B",
            a.min_storage_buffer_offset_alignment,
            a.min_uniform_buffer_offset_alignment
        );
        match a.allocator_report {
            Some((alloc, res, blocks)) => outln!(
                "    allocator report           {} allocated, {} reserved in {blocks} memory blocks (one 1 MiB probe buffer live)",
                fmt_bytes(alloc),
                fmt_bytes(res)
            ),
            None => outln!("    allocator report           not given by this backend"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
