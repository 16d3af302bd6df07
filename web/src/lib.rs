//! `vrampool-web`: the live page over the browser's WebGPU (Leptos) is built on
//! this crate. For now it holds what the page will drive and that already works
//! on any target: the engine on the simulated device, for browsers without WebGPU.

use vrampool::{Config, Engine, Error, Request, SimulatedDevice, Stats};

/// The pool the page falls back to when `navigator.gpu` or an adapter is
/// missing: the engine on a simulated device of `capacity` bytes with WebGPU's
/// default `max_buffer_size` (256 MiB).
pub fn simulated_pool(capacity: u64, config: Config) -> Result<Engine<SimulatedDevice>, Error> {
    Engine::new(
        SimulatedDevice::with_max_buffer_size(capacity, 256 << 20),
        config,
    )
}

/// Allocates `count` blocks of `size` bytes and frees every other one: the
/// page's "allocate N × size" then "free random" buttons. Returns the figures after.
pub fn allocate_and_free_half(
    engine: &mut Engine<SimulatedDevice>,
    count: usize,
    size: u64,
) -> Result<Stats, Error> {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(engine.allocate(Request::new(size, 0))?.id);
    }
    for id in ids.into_iter().step_by(2) {
        engine.free(id)?;
    }
    Ok(engine.stats())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_move_the_figures() {
        let mut e = simulated_pool(1 << 30, Config::default()).unwrap();
        let s = allocate_and_free_half(&mut e, 10, 100_000).unwrap();
        assert_eq!(s.total.allocations.current, 5);
        assert_eq!(s.counters.allocs, 10);
        assert!(s.total.cached_bytes.current > 0);
        assert!(
            allocate_and_free_half(&mut e, 1, 300 << 20).is_err(),
            "above WebGPU's max_buffer_size"
        );
    }
}
