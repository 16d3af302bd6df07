use vrampool::*;
fn main() {
    let traces: Vec<Trace> = ["gpt_train", "resnet_train", "batch_sweep"]
        .iter()
        .map(|n| Trace::open(format!("../shared/traces/{n}.csv.gz")).unwrap())
        .collect();
    let args: Vec<String> = std::env::args().collect();
    let headroom: f64 = args.get(1).map_or(0.08, |s| s.parse().unwrap());
    let medium: u64 = args.get(2).map_or(20 << 20, |s| s.parse().unwrap());
    let split: u64 = args.get(3).map_or(1 << 20, |s| s.parse().unwrap());
    let fit: f64 = args.get(4).map_or(0.5, |s| s.parse().unwrap());
    let lr: u64 = args.get(5).map_or(256, |s| s.parse().unwrap());
    for t in &traces {
        let cfg = Config { headroom: if headroom > 0.0 { Some(headroom) } else { None }, medium_segment: medium, min_split_remainder: split, large_fit: fit, large_rounding: lr, ..Config::default() };
        let mut e = Engine::new(SimulatedDevice::with_max_buffer_size(1 << 40, 4 << 30), cfg.clone()).unwrap();
        let r = replay(&mut e, t, 0);
        e.check_invariants().unwrap();
        // bisect min budget
        let (mut lo, mut hi) = (1.0f64, 1.5f64);
        while hi - lo > 0.0005 {
            let mid = (lo + hi) / 2.0;
            let c = Config { limit: Some(Limit::Bytes((t.peak_live as f64 * mid) as u64)), ..cfg.clone() };
            let mut e = Engine::new(SimulatedDevice::with_max_buffer_size(1 << 40, 4 << 30), c).unwrap();
            let r = replay(&mut e, t, 0);
            if r.ooms == 0 { hi = mid } else { lo = mid }
        }
        let c = Config { limit: Some(Limit::Bytes((t.peak_live as f64 * 1.03) as u64)), ..cfg.clone() };
        let mut e2 = Engine::new(SimulatedDevice::with_max_buffer_size(1 << 40, 4 << 30), c).unwrap();
        let r2 = replay(&mut e2, t, 0);
        println!("{:14} ratio {:.3} devallocs {:4} hits {} ns/op {:.0} | min budget {:.3} | @1.03 ooms {} devallocs {}", t.name, r.reserved_ratio, r.device_allocs, r.cache_hits, r.ns_per_op, hi, r2.ooms, r2.device_allocs);
    }
}
