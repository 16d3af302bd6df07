//! The `vrampool` binary end to end: every subcommand once on small inputs on
//! the real GPU adapter (lavapipe in CI) or the simulated device, checking the
//! numbers that must hold; and every bad input the harness promises to refuse
//! with one clear error line.

use std::path::PathBuf;

use assert_cmd::Command;
use serde_json::Value;
use vrampool::trace::{RowFigures, Targets};

fn vrampool() -> Command {
    let mut c = Command::cargo_bin("vrampool").expect("binary built");
    // lavapipe warns when XDG_RUNTIME_DIR is unset; keep stderr to our own lines.
    c.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    c
}

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/traces")
        .join(format!("{name}.csv.gz"))
}

fn json(c: &mut Command) -> Value {
    let out = c.arg("--json").output().expect("runs");
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn info_lists_the_adapter_with_memory_limits() {
    let v = json(vrampool().arg("info"));
    let a = &v.as_array().expect("a list")[0];
    assert!(f(&a["max_buffer_size"]) >= (256 << 20) as f64);
    assert!(f(&a["min_storage_buffer_offset_alignment"]) >= 4.0);
    assert!(!a["name"].as_str().unwrap().is_empty());
    // Vulkan gives an allocator report; the 1 MiB probe is in it.
    let (allocated, reserved) = (f(&a["allocator_report"][0]), f(&a["allocator_report"][1]));
    assert!(allocated >= (1 << 20) as f64 && reserved >= allocated);
    vrampool()
        .arg("info")
        .assert()
        .success()
        .stdout(predicates::str::contains("max_buffer_size"));
}

#[test]
fn compare_on_a_real_trace_beats_the_baselines() {
    let v = json(
        vrampool()
            .args(["replay", "--simulate", "--compare", "--min-budget"])
            .arg(trace("resnet_train")),
    );
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let by = |p: &str| rows.iter().find(|r| r["policy"] == p).expect(p);
    for r in rows {
        let rep = &r["report"];
        assert!(f(&rep["peak_reserved"]) >= f(&rep["peak_live"]), "{r}");
        assert_eq!(f(&rep["ooms"]), 0.0);
        assert_eq!(f(&rep["allocs"]), 3549.0);
    }
    // No pool: one device buffer per request, nothing held beyond live.
    let none = &by("none")["report"];
    assert_eq!(f(&none["device_allocs"]), f(&none["allocs"]));
    // A buffer destroyed per free of the trace: the harness's own frees of
    // what is live at the end are not the replay's (lstm_train ends with two
    // tensors live).
    assert_eq!(f(&none["device_frees"]), f(&none["frees"]));
    let lstm = json(
        vrampool()
            .args(["replay", "--simulate", "--policy", "none"])
            .arg(trace("lstm_train")),
    );
    let lstm = &lstm[0]["report"];
    assert_eq!(f(&lstm["device_frees"]), f(&lstm["frees"]), "{lstm}");
    assert!(f(&lstm["allocs"]) > f(&lstm["frees"]));
    assert!(f(&none["reserved_ratio"]) < 1.001);
    let ours = by("vrampool");
    assert!(f(&ours["report"]["reserved_ratio"]) <= 1.10);
    assert!(f(&ours["min_budget"]) <= 1.03);
    for other in ["pytorch", "size-class"] {
        let o = by(other);
        assert!(f(&ours["report"]["reserved_ratio"]) < f(&o["report"]["reserved_ratio"]));
        assert!(f(&ours["min_budget"]) <= f(&o["min_budget"]));
        assert!(f(&ours["report"]["device_allocs"]) <= f(&o["report"]["device_allocs"]));
    }
    // PyTorch with expandable_segments, simulated: what it gave on the H200
    // (data/traces/pytorch_figures.json), to the byte, and its smallest
    // budget (1.016 there).
    let vm = by("expandable");
    assert_eq!(f(&vm["report"]["peak_reserved"]), 3_183_476_736.0);
    assert_eq!(f(&vm["report"]["device_allocs"]), 107.0);
    assert!((f(&vm["min_budget"]) - 1.016).abs() <= 0.001, "{vm}");
}

#[test]
fn the_expandable_policy_needs_the_simulated_device() {
    // wgpu has no virtual memory: on a GPU the policy is refused by name,
    // and --compare runs the others.
    vrampool()
        .args(["replay", "--policy", "expandable"])
        .arg(trace("small_mlp"))
        .assert()
        .failure()
        .stderr(predicates::str::contains("add --simulate"));
    let v = json(
        vrampool()
            .args(["replay", "--compare", "--scale", "64"])
            .arg(trace("small_mlp")),
    );
    let policies: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(policies, ["vrampool", "pytorch", "size-class", "none"]);
}

#[test]
fn a_ceiling_replays_as_no_limit_where_a_budget_churns() {
    // gan_train (held out) under 1.5 × peak live: taken as a ceiling the
    // limit is never reached and the replay is the unlimited one; taken as a
    // budget (the default) the cache fills with exact segments and turns over.
    let gan = trace("heldout/gan_train");
    let run = |extra: &[&str]| {
        let v = json(
            vrampool()
                .args(["replay", "--simulate"])
                .args(extra)
                .arg(&gan),
        );
        v.as_array().unwrap()[0].clone()
    };
    let free = run(&[]);
    let ceiling = run(&["--budget", "1.5x", "--ceiling"]);
    let budget = run(&["--budget", "1.5x"]);
    assert_eq!(ceiling["limit_kind"], "Ceiling");
    assert_eq!(budget["limit_kind"], "Budget");
    assert_eq!(free["limit_kind"], Value::Null);
    for k in ["device_allocs", "peak_reserved", "segment_bytes_created"] {
        assert_eq!(ceiling["report"][k], free["report"][k], "{k}");
    }
    let allocs = |r: &Value| f(&r["report"]["device_allocs"]);
    assert!(
        allocs(&budget) > 10.0 * allocs(&ceiling),
        "a budget made {} device allocations, a ceiling {}",
        allocs(&budget),
        allocs(&ceiling)
    );
}

#[test]
fn a_replay_that_submits_ends_with_a_submit_before_empty_cache() {
    // A caller submits its last commands before it empties the cache: the
    // blocks it dropped since its last submit come back then, so
    // `empty_cache` destroys every segment and abandons none (without the
    // final submit, small_mlp at 64 abandoned 16 of its segments there).
    let mlp = trace("small_mlp");
    let run = |every: &str| {
        let v = json(
            vrampool()
                .args(["replay", "--simulate", "--submit-every", every])
                .arg(&mlp),
        );
        v.as_array().unwrap()[0].clone()
    };
    for every in ["0", "64"] {
        let r = run(every);
        assert_eq!(r["segments_abandoned"], 0, "--submit-every {every}");
        let (created, released, at_end) = (
            f(&r["report"]["segment_bytes_created"]),
            f(&r["report"]["segment_bytes_released"]),
            f(&r["released_by_empty_cache"]),
        );
        assert_eq!(
            released + at_end,
            created,
            "--submit-every {every}: everything made is given back"
        );
        assert!(at_end > 0.0, "--submit-every {every}");
    }
}

#[test]
fn corpus_gives_the_figures_tables_rows_and_what_they_miss() {
    // Two small traces at full size and ÷64 with their smallest budgets: the
    // figures equal data/figures.json's rows (tests/tests/figures.rs), and a
    // row misses R where peak reserved passes 1.10 × peak live + 2 MiB or
    // PyTorch's.
    let v = json(
        vrampool()
            .args(["corpus", "--scales", "1,64", "--min-budget"])
            .arg(trace("small_loop"))
            .arg(trace("small_mlp")),
    );
    let table: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/figures.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let mib = (1u64 << 20) as f64;
    let mut missing_r = 0;
    for r in rows {
        // PyTorch with expandable_segments is the table's third policy.
        for policy in ["vrampool", "pytorch", "expandable"] {
            let want = table["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| {
                    w["trace"] == r["trace"] && w["scale"] == r["scale"] && w["policy"] == policy
                })
                .unwrap_or_else(|| panic!("{} ÷{} in figures.json", r["trace"], r["scale"]));
            let got = &r[policy];
            for k in [
                "peak_live",
                "peak_reserved",
                "device_allocs",
                "bytes_created",
            ] {
                assert_eq!(
                    got[k], want[k],
                    "{} ÷{} {policy} {k}",
                    r["trace"], r["scale"]
                );
            }
            assert!((f(&got["min_budget"]) - f(&want["min_budget"])).abs() < 1e-9);
        }
        let (ours, pt) = (&r["vrampool"], &r["pytorch"]);
        let r_missed = f(&ours["peak_reserved"]) > 1.10 * f(&ours["peak_live"]) + 2.0 * mib
            || f(&ours["peak_reserved"]) > f(&pt["peak_reserved"]);
        assert_eq!(r["missed"]["reserved"], r_missed, "{r}");
        assert_eq!(
            r["missed_letters"].as_str().unwrap().contains('R'),
            r_missed
        );
        missing_r += r_missed as u64;
    }
    assert_eq!(v["summary"]["rows"], 4);
    assert_eq!(v["summary"]["missing_reserved"], missing_r);
    let at_or_below = rows
        .iter()
        .filter(|r| f(&r["vrampool"]["peak_reserved"]) <= f(&r["expandable"]["peak_reserved"]))
        .count();
    assert_eq!(
        v["summary"]["expandable"]["vrampool_at_or_below"],
        at_or_below
    );
    // Every letter is what core's Targets make of the checked-in table's two
    // rows (the figures test holds the table to the policy, and its GAPS list
    // to these letters): the table and corpus agree row by row.
    let figures = |w: &Value| RowFigures {
        peak_live: w["peak_live"].as_u64().unwrap(),
        peak_reserved: w["peak_reserved"].as_u64().unwrap(),
        device_allocs: w["device_allocs"].as_u64().unwrap(),
        bytes_created: w["bytes_created"].as_u64().unwrap(),
        min_budget: w["min_budget"].as_f64(),
    };
    let mut counts = [0u64; 4];
    for r in rows {
        let [ours, pt] = ["vrampool", "pytorch"].map(|policy| {
            figures(
                table["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|w| {
                        w["trace"] == r["trace"]
                            && w["scale"] == r["scale"]
                            && w["policy"] == policy
                    })
                    .unwrap(),
            )
        });
        let targets = Targets {
            full_size: r["scale"] == 1,
            budgets: true,
        };
        let want = targets.missed(&ours, &pt);
        assert_eq!(
            r["missed_letters"],
            want.to_string(),
            "{} ÷{}",
            r["trace"],
            r["scale"]
        );
        for (n, m) in counts.iter_mut().zip([
            want.reserved,
            want.budget == Some(true),
            want.allocations,
            want.bytes,
        ]) {
            *n += m as u64;
        }
    }
    let summary = &v["summary"];
    assert_eq!(
        [
            &summary["missing_reserved"],
            &summary["missing_budget"],
            &summary["missing_allocations"],
            &summary["missing_bytes"]
        ]
        .map(|x| x.as_u64().unwrap()),
        counts
    );
    // small_loop at full size misses R, A and B: not every row passes here.
    assert!(counts[0] >= 1 && counts[2] >= 1, "{counts:?}");
    // Without --min-budget the budget target is not judged.
    let quick = json(
        vrampool()
            .args(["corpus", "--scales", "64"])
            .arg(trace("small_mlp")),
    );
    assert_eq!(quick["rows"][0]["missed"]["budget"], Value::Null);
    assert_eq!(quick["summary"]["missing_budget"], Value::Null);
    assert_eq!(quick["summary"]["device_ms_full_size"], 0.0);
}

#[test]
fn corpus_plans_each_row_with_foresight_on_request() {
    // lstm_train ÷64: the policy peaks above the no-limit bound, a static
    // plan that knows every lifetime holds about peak live in one segment.
    let v = json(
        vrampool()
            .args(["corpus", "--scales", "64", "--foresight"])
            .arg(trace("lstm_train")),
    );
    let row = &v["rows"][0];
    let plan = &row["foresight"];
    assert!((1.0..1.01).contains(&f(&plan["ratio"])), "{plan}");
    assert_eq!(plan["segments"], 1);
    assert_eq!(plan["missed_letters"], "");
    assert!(f(&row["vrampool"]["ratio"]) > f(&plan["ratio"]));
    // Where the policy's peak came: an allocation of the replay, no later
    // than the first peak of live bytes here (the sequences only grow).
    let at = |k: &str| row["vrampool"][k].as_u64().unwrap();
    assert!(at("peak_reserved_at") >= 1 && at("peak_reserved_at") <= at("peak_live_at"));
    assert_eq!(row["peak_by_first_live_peak"], true);
    let s = &v["summary"]["foresight"];
    assert_eq!(
        (s["missing_reserved"].as_u64(), s["most_segments"].as_u64()),
        (Some(0), Some(1))
    );
    // Without the flag, no plan is made.
    let plain = json(
        vrampool()
            .args(["corpus", "--scales", "64"])
            .arg(trace("lstm_train")),
    );
    assert_eq!(plain["rows"][0]["foresight"], Value::Null);
    assert_eq!(plain["summary"]["foresight"], Value::Null);
}

#[test]
fn corpus_moves_relocatable_tensors_on_request() {
    // lstm_train ÷16 peaks above the no-limit bound (1.151 ×); with every
    // tensor relocatable the pool moves live blocks instead and holds less,
    // within the bound, while the PyTorch preset's figures stay the same.
    let t = trace("lstm_train");
    let args = ["corpus", "--scales", "16"];
    let plain = json(vrampool().args(args).arg(&t));
    let moved = json(vrampool().args(args).arg("--relocatable").arg(&t));
    let (p, m) = (&plain["rows"][0], &moved["rows"][0]);
    assert!(p["missed"]["reserved"].as_bool().unwrap(), "{p}");
    assert!(!m["missed"]["reserved"].as_bool().unwrap(), "{m}");
    assert!(f(&m["vrampool"]["ratio"]) < f(&p["vrampool"]["ratio"]));
    assert_eq!(p["vrampool"]["bytes_moved"], 0);
    assert!(m["vrampool"]["bytes_moved"].as_u64().unwrap() > 0);
    assert_eq!(m["pytorch"], p["pytorch"]);
    assert_eq!(
        moved["summary"]["bytes_moved"],
        m["vrampool"]["bytes_moved"]
    );
    // replay says the same, and moves nothing without the flag.
    let replayed = json(
        vrampool()
            .args(["replay", "--simulate", "--scale", "16", "--relocatable"])
            .arg(&t),
    );
    let r = &replayed.as_array().unwrap()[0]["report"];
    assert_eq!(r["peak_reserved"], m["vrampool"]["peak_reserved"]);
    assert_eq!(r["bytes_moved"], m["vrampool"]["bytes_moved"]);
    let still = json(
        vrampool()
            .args(["replay", "--simulate", "--scale", "16"])
            .arg(&t),
    );
    assert_eq!(still.as_array().unwrap()[0]["report"]["bytes_moved"], 0);
    // The table says what moved.
    let out = vrampool()
        .args(args)
        .arg("--relocatable")
        .arg(&t)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("relocatable: the vrampool policy moved"),
        "{text}"
    );
}

#[test]
fn follow_replays_a_trace_as_its_own_plan_places_it() {
    // resnet_train ÷64 run again as recorded: the plan's reserved bytes and
    // segments, in corpus and replay alike, within every target.
    let t = trace("resnet_train");
    let v = json(
        vrampool()
            .args(["corpus", "--scales", "64", "--follow", "--foresight"])
            .arg(&t),
    );
    let row = &v["rows"][0];
    assert_eq!(
        row["vrampool"]["peak_reserved"],
        row["foresight"]["reserved"]
    );
    assert_eq!(
        row["vrampool"]["device_allocs"],
        row["foresight"]["segments"]
    );
    assert_eq!(row["missed_letters"], "");
    let replayed = json(
        vrampool()
            .args(["replay", "--simulate", "--scale", "64", "--follow"])
            .arg(&t),
    );
    let r = &replayed.as_array().unwrap()[0]["report"];
    assert_eq!(r["peak_reserved"], row["vrampool"]["peak_reserved"]);
    assert_eq!(r["device_allocs"], row["vrampool"]["device_allocs"]);
    // Resized, the workload has left its plan: the policy serves it, with
    // the plan's segment among its own.
    let moved = json(
        vrampool()
            .args(["corpus", "--scales", "64", "--resize", "1.1", "--follow"])
            .arg(&t),
    );
    assert!(f(&moved["rows"][0]["vrampool"]["device_allocs"]) > 1.0);
}

#[test]
fn a_resized_row_is_the_workload_resized_at_every_scale() {
    // 100 live 4 KiB tensors and one of 1 MiB: at ÷64 they are 64 B and
    // 16 KiB. Resized after the scaling, every 64 B tensor rounded up to
    // 512 B, and ×1.1 held 3 × the live bytes; resized at full size, then
    // scaled, it holds 1.1 ×.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.csv");
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for i in 0..100u64 {
        csv += &format!("0,{i},allocate,{:#x},4096,0x0\n", 0x1000 + i * 0x1000);
    }
    csv += "0,100,allocate,0x1000000,1048576,0x0\n";
    std::fs::write(&path, csv).unwrap();
    let rows = json(
        vrampool()
            .args(["corpus", "--scales", "64", "--resize", "1,1.1"])
            .arg(&path),
    );
    let live = |i: usize| f(&rows["rows"][i]["vrampool"]["peak_live"]);
    let grown = live(1) / live(0);
    assert!(
        (1.09..1.15).contains(&grown),
        "×1.1 at ÷64 holds {grown:.3} × the live bytes"
    );
}

#[test]
fn a_preallocation_is_counted_and_used_by_corpus_and_replay_alike() {
    // `--set growth={"Preallocate":N}`: its segment was left out of the
    // device allocations and bytes created (a row could show none while
    // holding N), and replay's went to a usage no request had.
    let t = trace("small_loop");
    let row = json(vrampool().args(["corpus", "--scales", "1"]).arg(&t));
    let n = 2 * row["rows"][0]["vrampool"]["peak_live"].as_u64().unwrap();
    let set = format!("growth={{\"Preallocate\":{n}}}");
    let corpus = json(
        vrampool()
            .args(["corpus", "--scales", "1", "--set", &set])
            .arg(&t),
    );
    let v = &corpus["rows"][0]["vrampool"];
    assert!(f(&v["bytes_created"]) >= f(&v["peak_reserved"]), "{v}");
    assert!(f(&v["peak_reserved"]) >= n as f64, "{v}");
    let replay = json(
        vrampool()
            .args(["replay", "--simulate", "--set", &set])
            .arg(&t),
    );
    let r = &replay[0]["report"];
    assert!(
        f(&r["segment_bytes_created"]) >= f(&r["peak_reserved"]),
        "{r}"
    );
    // The preallocation serves the replay: it holds the whole peak, so the
    // one segment is all the replay makes.
    assert_eq!(f(&r["device_allocs"]), 1.0, "{r}");
}

#[test]
fn set_changes_the_vrampool_policy_in_corpus_and_replay_alike() {
    // No soft headroom: small_loop reserves more, and corpus and replay agree.
    let t = trace("small_loop");
    let corpus = |extra: &[&str]| {
        let v = json(
            vrampool()
                .args(["corpus", "--scales", "1", "--resize", "1,1.1"])
                .args(extra)
                .arg(&t),
        );
        v["rows"].as_array().unwrap().clone()
    };
    let default = corpus(&[]);
    let cached = corpus(&["--set", "headroom=null"]);
    assert_eq!(default.len(), 2);
    assert!(
        f(&default[1]["vrampool"]["peak_live"]) >= 1.1 * f(&default[0]["vrampool"]["peak_live"])
    );
    let reserved = |r: &Value| f(&r["vrampool"]["peak_reserved"]);
    assert!(
        reserved(&cached[0]) > reserved(&default[0]),
        "{} vs {}",
        reserved(&cached[0]),
        reserved(&default[0])
    );
    assert_eq!(cached[0]["pytorch"], default[0]["pytorch"]);
    // A jittered row (each distinct size moved by up to 10 %) beside the
    // recorded one.
    let jittered = json(
        vrampool()
            .args(["corpus", "--scales", "1", "--jitter", "0,3"])
            .arg(&t),
    );
    let rows = jittered["rows"].as_array().unwrap();
    assert_eq!(
        (rows[0]["jitter"].as_u64(), rows[1]["jitter"].as_u64()),
        (Some(0), Some(3))
    );
    assert_eq!(rows[0]["vrampool"], default[0]["vrampool"]);
    let live = |r: &Value| f(&r["vrampool"]["peak_live"]);
    assert!(
        live(&rows[1]) != live(&rows[0]) && (live(&rows[1]) / live(&rows[0]) - 1.0).abs() < 0.1
    );
    let replayed = json(
        vrampool()
            .args(["replay", "--simulate", "--set", "headroom=null"])
            .arg(&t),
    );
    assert_eq!(
        f(&replayed[0]["report"]["peak_reserved"]),
        reserved(&cached[0])
    );
}

#[test]
fn replay_on_the_gpu_matches_wgpus_allocator_report() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let v = json(
        vrampool()
            .args(["replay", "--scale", "32", "--budget", "1.05x"])
            .arg(trace("gpt_train"))
            .arg("--timeline")
            .arg(&svg),
    );
    let r = &v[0];
    assert_ne!(r["device"].as_str().unwrap(), "simulated");
    let rep = &r["report"];
    assert_eq!(f(&rep["ooms"]), 0.0);
    assert!(f(&rep["peak_reserved"]) <= f(&r["limit"]));
    // At the pool's peak wgpu's allocator holds the pool's segments and its
    // own few buffers (zero-init, indirect validation: 0.5 MiB on lavapipe).
    let own = 1 << 20;
    let peak = &r["driver"]["allocator_at_peak"];
    let (pool_reserved, wgpu_allocated) = (f(&peak[0]), f(&peak[1]));
    assert!(
        wgpu_allocated >= pool_reserved && wgpu_allocated <= pool_reserved + own as f64,
        "{peak}"
    );
    // After empty_cache the pool reserves nothing, and only wgpu's own
    // buffers are left.
    let after = &r["driver"]["allocator_after_empty_cache"];
    assert_eq!(f(&after[0]), 0.0, "{after}");
    assert!(f(&after[1]) <= own as f64, "{after}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("reserved") && chart.contains("budget"));
    // A preallocation stays through empty_cache, in the pool's figure and
    // in wgpu's (it was reported as 0 there).
    let v = json(
        vrampool()
            .args([
                "replay",
                "--scale",
                "32",
                "--set",
                r#"growth={"Preallocate":67108864}"#,
            ])
            .arg(trace("gpt_train")),
    );
    let after = &v[0]["driver"]["allocator_after_empty_cache"];
    assert_eq!(f(&after[0]), (64 << 20) as f64, "{after}");
    assert!(f(&after[1]) >= (64 << 20) as f64, "{after}");
}

/// The lines that say where a replay ran and which chart it wrote reach a
/// log file too (a progress bar's own lines go nowhere when stderr is not a
/// terminal, which dropped them).
#[test]
fn replay_says_where_it_ran_and_what_it_wrote_in_a_log_too() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let out = vrampool()
        .args(["replay", "--simulate"])
        .arg(trace("small_mlp"))
        .arg("--timeline")
        .arg(&svg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines().any(|l| l == "on simulated device (141.00 GiB)"),
        "{err}"
    );
    assert!(err.contains(&format!("wrote {}", svg.display())), "{err}");
    assert!(svg.exists());
}

/// An invocation the harness refuses exits 2, as clap's own refusals do and
/// `replay --help` says; a run that fails exits 1, one that ran out of
/// memory 3.
#[test]
fn usage_errors_exit_2_and_failures_1() {
    let t = trace("small_mlp").to_str().unwrap().to_string();
    let code = |args: &[&str]| {
        let out = vrampool().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for args in [
        &["replay", "--simulate", "--scale", "0", &t][..],
        &["replay", "--simulate", "--budget", "0.5x", &t],
        &["replay", "--simulate", "--budget", "lots", &t],
        &["replay", "--simulate", "--budget", "4000", &t],
        &["corpus", "--max-buffer-size", "300", &t],
        &["replay", "--simulate", "--set", "nosuch=1", &t],
        &["replay", "--simulate", "--set", "headroom=-1", &t],
        &["corpus", "--scales", "0", &t],
        &["bench", "--simulate", "--threads", "2"],
        &["workload", "--simulate", "--steps", "1"],
        &["replay", "--simulate", "--no-such-flag", &t],
        &["replay", "--simulate", "--compare", "--policy", "none", &t],
        &["replay", "--simulate", "--max-buffer-size", "1048576", &t],
        &[
            "replay",
            "--simulate",
            "--set",
            "max_segment_size=1048576",
            &t,
        ],
        &[
            "corpus",
            "--scales",
            "1",
            "--set",
            "max_segment_size=1048576",
            &t,
        ],
        &[
            "workload",
            "--simulate",
            "--batch",
            "4294967295",
            "--steps",
            "2",
        ],
    ] {
        let (got, err) = code(args);
        assert_eq!(got, Some(2), "{args:?}: {err}");
    }
    let (got, err) = code(&["replay", "--simulate", "no/such/trace.csv"]);
    assert_eq!(got, Some(1), "{err}");
    let (got, err) = code(&["replay", "--simulate", "--capacity", "1000", &t]);
    assert_eq!(got, Some(3), "{err}");
}

#[test]
fn summary_prints_memory_summary() {
    vrampool()
        .args(["replay", "--simulate", "--summary"])
        .arg(trace("resnet_train"))
        .assert()
        .success()
        .stdout(predicates::str::contains("memory_summary of resnet_train"))
        .stdout(predicates::str::contains("Reserved memory"));
    // Under a budget that refuses 398 requests, the table's hit rate is the
    // summary's: hits of the requests served.
    let out = vrampool()
        .args(["replay", "--simulate", "--summary", "--scale", "64"])
        .args(["--budget", "1.0x"])
        .arg(trace("small_loop"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    let summary = out
        .split("hit rate ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .unwrap();
    let row = out.lines().find(|l| l.starts_with("small_loop")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[cols.len() - 5], format!("{summary}%"), "{out}");
    assert_ne!(cols[cols.len() - 4], "0", "requests were refused: {row}");
}

#[test]
fn bench_pool_hit_is_cheaper_than_create_buffer() {
    let v = json(vrampool().args(["bench", "--sizes", "4096,16777216", "--time-ms", "30"]));
    for row in v["rows"].as_array().unwrap() {
        let (raw, pool) = (f(&row["raw_ns"]), f(&row["pool_ns"]));
        assert!(pool > 0.0 && pool < raw, "one buffer at a time: {row}");
        let (raw, pool) = (f(&row["raw_live_ns"]), f(&row["pool_live_ns"]));
        assert!(pool > 0.0 && pool < raw, "with N live: {row}");
        // A figure, not a timed assertion (the benchmark is the bench itself).
        assert!(f(&row["engine_ns_per_op"]) > 0.0, "{row}");
        assert!((f(&row["ratio"]) - f(&row["raw_ns"]) / f(&row["pool_ns"])).abs() < 1e-6);
    }
}

#[test]
fn bench_threads_reports_hits_per_second_and_scaling() {
    let v = json(vrampool().args([
        "bench",
        "--sizes",
        "4096",
        "--time-ms",
        "30",
        "--threads",
        "1,2",
    ]));
    let rows = v["threads"].as_array().unwrap();
    // Each count on the default pool (a submit per frame), then on one with
    // Reuse::Immediate.
    assert_eq!(rows.len(), 4, "{v}");
    let shape: Vec<_> = rows
        .iter()
        .map(|r| (r["reuse"].as_str().unwrap(), f(&r["threads"])))
        .collect();
    assert_eq!(
        shape,
        [
            ("after_submit", 1.0),
            ("after_submit", 2.0),
            ("immediate", 1.0),
            ("immediate", 2.0)
        ]
    );
    // Scaling is hits per second over the first count's, per reuse mode (a
    // figure, not a timed assertion: two threads on a busy 2-core machine
    // may scale by anything).
    for pair in rows.chunks(2) {
        assert_eq!(f(&pair[0]["scaling"]), 1.0);
        let over = f(&pair[1]["hits_per_s"]) / f(&pair[0]["hits_per_s"]);
        assert!((f(&pair[1]["scaling"]) - over).abs() < 1e-6, "{pair:?}");
    }
    for r in rows {
        assert!(f(&r["hits_per_s"]) > 0.0, "{r}");
        // Every operation counted was a cache hit.
        assert_eq!(f(&r["cache_misses"]), 0.0, "{r}");
    }
    refuses(&["bench", "--threads", "0"], &[], "from 1 to 1024 threads");
    refuses(
        &["bench", "--threads", "5000"],
        &[],
        "from 1 to 1024 threads",
    );
    refuses(
        &["bench", "--simulate", "--threads", "2"],
        &[],
        "drop --simulate",
    );
}

#[test]
fn workload_trains_with_quantized_weights() {
    for (dtype, words) in [("f32", 1.0), ("f16", 2.0), ("int8", 4.0)] {
        let v = json(vrampool().args([
            "workload", "--batch", "32", "--hidden", "64", "--steps", "20", "--dtype", dtype,
        ]));
        assert!(
            f(&v["last_loss"]) < 0.8 * f(&v["first_loss"]),
            "{dtype}: {v}"
        );
        assert_eq!(
            f(&v["weight_bytes"]) * words,
            f(&v["f32_weight_bytes"]),
            "{dtype}"
        );
        // Step tensors come back from the cache after the first step.
        let s = &v["stats"]["counters"];
        assert!(f(&s["cache_hits"]) >= 0.8 * f(&s["allocs"]), "{s}");
    }
}

#[test]
fn workload_follows_the_plan_of_its_recorded_run() {
    // Trained twice on the GPU: recorded, then following the plan of the
    // recording. Same computation, so the same losses; every request of the
    // planned pools placed, no more device allocations and no more memory.
    let v = json(vrampool().args([
        "workload", "--batch", "32", "--hidden", "64", "--steps", "20", "--follow",
    ]));
    let (rec, follow) = (&v["recorded"], &v["follow"]);
    assert_eq!(v["losses"], rec["losses"], "{v}");
    assert_eq!(f(&follow["unplaced"]), 0.0, "{follow}");
    assert!(f(&follow["placed"]) >= 20.0, "{follow}");
    assert_eq!(follow["following"], false, "the plan is used up: {follow}");
    assert!(f(&rec["plan_segments"]) >= 1.0, "{rec}");
    let allocs = |s: &serde_json::Value| f(&s["stats"]["counters"]["device_allocs"]);
    assert!(allocs(&v) <= allocs(rec), "{v}");
    assert!(f(&v["peak_reserved"]) <= f(&rec["peak_reserved"]), "{v}");
    // Without --follow there is no recorded run.
    let plain = json(vrampool().args([
        "workload", "--batch", "32", "--hidden", "64", "--steps", "2",
    ]));
    assert!(
        plain["recorded"].is_null() && plain["follow"].is_null(),
        "{plain}"
    );
}

#[test]
fn find_batch_fits_the_budget_on_the_gpu() {
    let budget = 24u64 << 20;
    let v = json(vrampool().args([
        "workload",
        "--hidden",
        "128",
        "--steps",
        "3",
        "--find-batch",
        "--budget",
        &budget.to_string(),
    ]));
    let batch = f(&v["found_batch"]);
    assert!(batch > 1000.0, "{v}");
    assert!(f(&v["peak_reserved"]) <= budget as f64);
    assert_eq!(f(&v["stats"]["counters"]["ooms"]), 0.0);
    // The largest that fits, or near it: 5 % more runs out of memory on
    // the GPU under the same budget (here, one more already does).
    let more = ((batch * 1.05) as u64).to_string();
    let out = vrampool()
        .args([
            "workload", "--hidden", "128", "--steps", "3", "--batch", &more,
        ])
        .args(["--budget", &budget.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "batch {more} fit too");
    assert!(err.contains("out of memory"), "{err}");
}

/// Runs the binary expecting one clear error line on stderr.
fn refuses(args: &[&str], env: &[(&str, &str)], says: &str) {
    let mut c = vrampool();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains("XDG_RUNTIME_DIR") && !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(says), "{args:?}: `{err}` lacks `{says}`");
}

fn file(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

const H: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

#[test]
fn bad_traces_are_refused_with_their_line() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        ("missing", None, "cannot read the trace"),
        (
            "size",
            Some(format!("{H}0,0,allocate,0x10,12ab,0x0\n")),
            "line 2: size `12ab` is not a non-negative integer",
        ),
        (
            "negative",
            Some(format!("{H}0,0,allocate,0x10,-5,0x0\n")),
            "line 2: size `-5`",
        ),
        (
            "action",
            Some(format!(
                "{H}0,0,allocate,0x10,512,0x0\n0,0,resize,0x10,512,0x0\n"
            )),
            "line 3: unknown action `resize`",
        ),
        (
            "unknown",
            Some(format!("{H}0,0,free,0x99,512,0x0\n")),
            "line 2: free of pointer 0x99, which is not live",
        ),
        (
            "double",
            Some(format!(
                "{H}0,0,allocate,0x10,512,0x0\n0,0,free,0x10,512,0x0\n0,0,free,0x10,512,0x0\n"
            )),
            "line 4: free of pointer 0x10",
        ),
        (
            "zero",
            Some(format!("{H}0,0,allocate,0x10,0,0x0\n")),
            "line 2: allocation of size 0",
        ),
        (
            "header",
            Some("a,b,c\n1,2,3\n".to_string()),
            "line 1: expected the RMM header",
        ),
        (
            "columns",
            Some(format!("{H}0,0,allocate,0x10\n")),
            "line 2: expected 6 columns",
        ),
        ("empty", Some(H.to_string()), "holds no allocation"),
    ];
    for (name, body, says) in cases {
        let path = match body {
            Some(b) => file(&d, &format!("{name}.csv"), &b),
            None => d.path().join("nope.csv").to_str().unwrap().to_string(),
        };
        refuses(&["replay", "--simulate", &path], &[], says);
    }
    // A directory is not a readable trace.
    refuses(
        &["replay", "--simulate", d.path().to_str().unwrap()],
        &[],
        "cannot read the trace",
    );
    // A truncated gzip stream.
    let bytes = std::fs::read(trace("resnet_train")).unwrap();
    let cut = d.path().join("cut.csv.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    refuses(
        &["replay", "--simulate", cut.to_str().unwrap()],
        &[],
        "the file is truncated or corrupt; copy or download it again",
    );
    // Bytes that are not UTF-8.
    let utf = d.path().join("utf.csv");
    std::fs::write(
        &utf,
        [H.as_bytes(), b"0,1,allocate,0x10,\xff\xfe,0x0\n"].concat(),
    )
    .unwrap();
    refuses(
        &["replay", "--simulate", utf.to_str().unwrap()],
        &[],
        "utf: line 2: CSV parse error",
    );
    // A 1 GiB line in a 1 MB gzip file (1024 members of 1 MiB of digits):
    // refused at 64 KiB, not read into memory.
    let member = |bytes: &[u8]| {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    };
    let mut huge = member(format!("{H}0,1,allocate,0x10,").as_bytes());
    let digits = member(&vec![b'9'; 1 << 20]);
    for _ in 0..1024 {
        huge.extend_from_slice(&digits);
    }
    let path = d.path().join("huge.csv.gz");
    std::fs::write(&path, &huge).unwrap();
    refuses(
        &["replay", "--simulate", path.to_str().unwrap()],
        &[],
        "huge: line 2: line longer than 64 KiB (an RMM log row is about 60 bytes): is this an RMM log?",
    );
    // The reader's reason, once: it was the message's and its source's both.
    let missing = d.path().join("no-such.csv");
    let out = vrampool()
        .args(["replay", "--simulate", missing.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn bad_requests_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let t = file(
        &d,
        "ok.csv",
        &format!("{H}0,0,allocate,0x10,4096,0x0\n0,0,free,0x10,4096,0x0\n"),
    );
    refuses(
        &["replay", "--simulate", "--max-buffer-size", "1024", &t],
        &[],
        "allows at most 1.00 KiB per buffer (max_buffer_size); pass --scale 4",
    );
    // Options a command would have ignored.
    refuses(
        &["replay", "--simulate", "--memory-hints", "pool", &t],
        &[],
        "the simulated device has none",
    );
    refuses(&["info", "--adapter", "0"], &[], "info lists every adapter");
    // --summary with --json: the summary in the JSON, not dropped.
    let v = json(vrampool().args(["replay", "--simulate", "--summary", &t]));
    assert!(
        v[0]["memory_summary"]
            .as_str()
            .is_some_and(|s| s.contains("Reserved")),
        "{}",
        v[0]["memory_summary"]
    );
    // Counted from the file's sizes, not the already scaled ones: --scale 2
    // leaves 2 KiB, and the advice is 4 (it said 2, the scale given).
    refuses(
        &[
            "replay",
            "--simulate",
            "--max-buffer-size",
            "1024",
            "--scale",
            "2",
            &t,
        ],
        &[],
        "pass --scale 4",
    );
    // A size the policies round past the buffer is refused here too, not
    // replayed into an out-of-memory: 1000 B is a 1024 B block.
    let odd = file(
        &d,
        "odd.csv",
        &format!("{H}0,0,allocate,0x10,1000,0x0\n0,0,free,0x10,1000,0x0\n"),
    );
    refuses(
        &["replay", "--simulate", "--max-buffer-size", "1000", &odd],
        &[],
        "allows at most 1000 B per buffer",
    );
    refuses(
        &["replay", "--simulate", "--set", "headrom=0.1", &t],
        &[],
        "the configuration has no field `headrom`; its fields are",
    );
    refuses(
        &[
            "replay",
            "--simulate",
            "--policy",
            "pytorch",
            "--set",
            "headroom=0.1",
            &t,
        ],
        &[],
        "--set changes the vrampool policy's configuration; pytorch has none",
    );
    refuses(
        &["corpus", "--set", "without_limit.large_fit=2", &t],
        &[],
        "without_limit.large_fit must be a fraction in 0..=1, got 2",
    );
    refuses(
        &["corpus", "--capacity", "2048", &t],
        &[],
        "ok ÷1 ×1: vrampool: 1 of 1 allocations were refused with no limit",
    );
    // Options a run would silently ignore.
    refuses(
        &[
            "replay",
            "--simulate",
            "--policy",
            "none",
            "--submit-every",
            "7",
            &t,
        ],
        &[],
        "--submit-every applies to the engine policies (vrampool, pytorch); none ignores it",
    );
    refuses(
        &[
            "replay",
            "--simulate",
            "--policy",
            "size-class",
            "--access",
            "any",
            &t,
        ],
        &[],
        "--access applies to the engine policies",
    );
    refuses(
        &[
            "replay",
            "--simulate",
            "--policy",
            "pytorch",
            "--relocatable",
            &t,
        ],
        &[],
        "--relocatable applies to the vrampool policy (the pytorch preset never moves a block)",
    );
    refuses(
        &[
            "replay",
            "--simulate",
            "--relocatable",
            "--budget",
            "2x",
            &t,
        ],
        &[],
        "--relocatable moves blocks only with no limit or under a --ceiling",
    );
    refuses(
        &["replay", "--simulate", "--nvidia-smi", &t],
        &[],
        "--nvidia-smi reads a GPU's memory",
    );
    refuses(
        &["corpus", "--memory-hints", "memory-usage", &t],
        &[],
        "--memory-hints, --summary and --timeline are for replay",
    );
    // A device the pool fits and PyTorch's expandable segments (20 MiB
    // pages ÷64) do not: the row's figures would be a partial replay's.
    let gpt = trace("gpt_train");
    refuses(
        &[
            "corpus",
            "--scales",
            "64",
            "--capacity",
            "180000000",
            gpt.to_str().unwrap(),
        ],
        &[],
        "gpt_train ÷64 ×1: expandable: 3 of",
    );
    refuses(
        &["corpus", "--set", "limit=1000", &t],
        &[],
        "--set limit=1000: the limit is the command's",
    );
    refuses(
        &["corpus", "--summary", &t],
        &[],
        "--adapter, --memory-hints, --summary and --timeline are for replay",
    );
    refuses(
        &["corpus", "--follow", "--min-budget", &t],
        &[],
        "drop --min-budget",
    );
    refuses(
        &["corpus", "--follow", "--relocatable", &t],
        &[],
        "a plan's blocks never move: drop --relocatable",
    );
    refuses(
        &["replay", "--simulate", "--follow", "--relocatable", &t],
        &[],
        "never moves it: drop --relocatable",
    );
    refuses(
        &["replay", "--simulate", "--follow", "--budget", "1.5x", &t],
        &[],
        "drop --budget and --min-budget",
    );
    refuses(
        &["replay", "--simulate", "--follow", "--access", "any", &t],
        &[],
        "drop --access, --submit-every and --policy",
    );
    refuses(
        &["corpus", "--scales", "0", &t],
        &[],
        "--scales 0: a divisor must be at least 1",
    );
    refuses(
        &["corpus", "--resize", "0", &t],
        &[],
        "--resize 0: a factor must be a positive number",
    );
    // A factor past what a size can count: the sizes hold at the largest
    // (no wrap to a small trace with believable figures), so no buffer fits.
    refuses(
        &["corpus", "--resize", "1e300", &t],
        &[],
        "but the device allows at most",
    );
    // Below the 512 bytes every request is rounded to, no scale would fit.
    for small in ["0", "511"] {
        refuses(
            &["replay", "--simulate", "--max-buffer-size", small, &t],
            &[],
            &format!("--max-buffer-size {small}: the policies round every request up to 512 bytes"),
        );
    }
    refuses(
        &["corpus", "no/such/folder"],
        &[],
        "no/such/folder: no such file or folder",
    );
    refuses(
        &[
            "corpus",
            d.path().to_str().unwrap(),
            "--scales",
            "1",
            "--max-buffer-size",
            "1024",
        ],
        &[],
        "ok ÷1 ×1: one allocation is 4.00 KiB but the device allows at most 1.00 KiB per buffer",
    );
    refuses(
        &["replay", "--simulate", "--budget", "4000", &t],
        &[],
        "below ok's peak live of 4096 bytes",
    );
    refuses(
        &["replay", "--simulate", "--budget", "0.5x", &t],
        &[],
        "below the trace's peak live",
    );
    refuses(
        &["replay", "--simulate", "--budget", "lots", &t],
        &[],
        "expected bytes",
    );
    refuses(
        &["replay", "--simulate", "--scale", "0", &t],
        &[],
        "--scale 0",
    );
    refuses(
        &["replay", "--simulate", "--ceiling", &t],
        &[],
        "give --budget (or --min-budget)",
    );
    refuses(
        &[
            "replay",
            "--simulate",
            "--ceiling",
            "--budget",
            "2x",
            "--policy",
            "pytorch",
            &t,
        ],
        &[],
        "vrampool policy only",
    );
    refuses(
        &["bench", "--simulate", "--sizes", "0"],
        &[],
        "a size of 0 bytes",
    );
    refuses(
        &["workload", "--simulate", "--find-batch", "--budget", "1000"],
        &[],
        "not even a batch of 1 fits",
    );
    // A budget of 8 EiB: the simulated device twice its size saturates.
    let huge = vrampool()
        .args(["workload", "--simulate", "--steps", "2"])
        .args(["--budget", "9223372036854775808", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&huge.stderr);
    assert!(huge.status.success() && !err.contains("panicked"), "{err}");
    // A batch past what the device binds: refused before the run, saying
    // what fits (the simulated H200's: Vulkan binds 2^31 - 1 bytes).
    refuses(
        &["workload", "--simulate", "--batch", "600000"],
        &[],
        "a batch of at most 524287 fits",
    );
    // Options a command would ignore.
    refuses(
        &["workload", "--simulate", "--follow"],
        &[],
        "--follow and --timeline need a GPU",
    );
    refuses(
        &["replay", "--capacity", "1000", &t],
        &[],
        "--capacity and --max-buffer-size size the simulated device",
    );
    refuses(
        &["replay", "--max-buffer-size", "1000", &t],
        &[],
        "add --simulate, or drop them",
    );
    refuses(
        &["info", "--summary"],
        &[],
        "--summary and --timeline are for replay and workload",
    );
    refuses(
        &["bench", "--simulate", "--timeline", "x.svg"],
        &[],
        "bench times allocations on pools it makes and drops",
    );
    refuses(
        &["replay", "--adapter", "no-such-gpu", &t],
        &[],
        "matches no adapter",
    );
    refuses(
        &["replay", "--adapter", "99", &t],
        &[],
        "adapters, and no name has the word 99",
    );
    refuses(
        &["replay", &t],
        &[
            ("WGPU_BACKEND", "vulkan"),
            ("VK_ICD_FILENAMES", "/nonexistent"),
        ],
        "no GPU adapter found",
    );
    refuses(
        &["info"],
        &[
            ("WGPU_BACKEND", "vulkan"),
            ("VK_ICD_FILENAMES", "/nonexistent"),
        ],
        "no GPU adapter found",
    );
}

#[test]
fn a_plan_is_made_for_the_segments_the_configuration_allows() {
    // small_mlp's largest tensor is 6.1 MiB, its plan one 47 MiB segment:
    // planned for the device's 4 GiB buffers, the engine refused it under
    // --set max_segment_size=16 MiB ("cannot allocate 47.00 MiB").
    let t = trace("small_mlp");
    let set = ["--set", "max_segment_size=16777216"];
    let v = json(
        vrampool()
            .args(["replay", "--simulate", "--follow"])
            .args(set)
            .arg(&t),
    );
    let rep = &v[0]["report"];
    assert_eq!(f(&rep["ooms"]), 0.0, "{v}");
    assert!(
        f(&rep["peak_reserved"]) <= 1.10 * f(&rep["peak_live"]),
        "{v}"
    );
    let v = json(
        vrampool()
            .args(["corpus", "--follow", "--scales", "1"])
            .args(set)
            .arg(&t),
    );
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(1), "{v}");
}

#[test]
fn the_size_class_baseline_gives_its_cache_back_when_the_device_refuses() {
    // 4 KiB freed, then 8 KiB on a device of 10 000 bytes: the cached 4 KiB
    // buffer must go for the 8 KiB one to fit. It went only under --budget.
    let d = tempfile::tempdir().unwrap();
    let grow = file(
        &d,
        "grow.csv",
        &format!(
            "{H}0,0,allocate,0x10,4096,0x0\n0,1,free,0x10,4096,0x0\n0,2,allocate,0x20,8192,0x0\n"
        ),
    );
    let v = json(vrampool().args([
        "replay",
        "--simulate",
        "--capacity",
        "10000",
        "--policy",
        "size-class",
        &grow,
    ]));
    assert_eq!(f(&v[0]["report"]["ooms"]), 0.0, "{v}");
    assert_eq!(f(&v[0]["report"]["peak_reserved"]), 8192.0, "{v}");
}

#[test]
fn traces_of_one_name_are_told_apart() {
    // Two files `ok.csv` in two folders: the table's rows and --timeline's
    // files had one name, the second file overwriting the first.
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("b")).unwrap();
    let body = format!("{H}0,0,allocate,0x10,4096,0x0\n0,1,free,0x10,4096,0x0\n");
    let first = file(&d, "ok.csv", &body);
    let second = file(&d, "b/ok.csv", &body);
    let svg = d.path().join("t.svg");
    let v = json(
        vrampool()
            .args(["replay", "--simulate", "--timeline"])
            .arg(&svg)
            .args([&first, &second]),
    );
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["trace"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ok", "ok-2"]);
    for name in ["t-ok-vrampool.svg", "t-ok-2-vrampool.svg"] {
        assert!(d.path().join(name).exists(), "{name}");
    }
}

#[test]
fn a_device_too_small_for_the_trace_is_no_success() {
    // With no limit, a replay that ran out of memory on a device smaller
    // than the trace printed its partial figures (a ratio of 0.00002 over
    // a peak live it never reached) and exited 0.
    let t = trace("small_loop");
    let out = vrampool()
        .args(["replay", "--simulate", "--capacity", "1000"])
        .arg(&t)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("allocations were refused with no limit, on simulated device")
            && err.contains("figures are of a partial replay")
            && err.contains("give a larger --capacity"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The table still prints, its OOMs column counting them.
    assert!(String::from_utf8_lossy(&out.stdout).contains("OOMs"));
}

#[test]
fn a_size_near_u64_max_is_an_out_of_memory_for_every_policy() {
    // On a device that claims to hold it: the baselines' size arithmetic
    // wrapped to a 0-byte buffer and "served" it.
    let d = tempfile::tempdir().unwrap();
    let t = file(
        &d,
        "huge.csv",
        &format!("{H}0,0,allocate,0x10,{},0x0\n", u64::MAX),
    );
    let max = u64::MAX.to_string();
    let out = vrampool()
        .args(["replay", "--simulate", "--compare", "--json"])
        .args(["--max-buffer-size", &max, "--capacity", &max, &t])
        .output()
        .unwrap();
    // Out of memory with no limit: exit 3, and a line per policy saying so.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.matches("refused with no limit").count(), 5, "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for r in rows {
        let rep = &r["report"];
        assert_eq!(f(&rep["ooms"]), 1.0, "{r}");
        assert_eq!(f(&rep["device_allocs"]), 0.0, "{r}");
    }
}

#[test]
fn allocate_failure_rows_are_reported_not_dropped_silently() {
    // A recording of a run that hit out-of-memory: its refused allocations
    // are skipped (no replay asks for them), and the replay says so.
    let d = tempfile::tempdir().unwrap();
    let t = file(
        &d,
        "failed.csv",
        &format!(
            "{H}0,0,allocate,0x10,4096,0x0\n0,1,allocate failure,0x0,99999,0x0\n0,2,free,0x10,4096,0x0\n"
        ),
    );
    let out = vrampool()
        .args(["replay", "--simulate", "--json", &t])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("failed: 1 `allocate failure` rows skipped"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["skipped_failures"], 1);
}

/// Runs the harness with `args`, its stdout closed before it writes (`| head`).
fn with_stdout_closed(args: &[impl AsRef<std::ffi::OsStr>]) -> std::process::Output {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("vrampool"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take());
    child.wait_with_output().expect("exits")
}

#[test]
fn a_reader_that_goes_away_is_not_a_crash() {
    // `vrampool … | head`: stdout closes before the output is written.
    for args in [
        &["info"][..],
        &["replay", "--simulate", "--summary"][..],
        &["bench", "--simulate", "--sizes", "4096"][..],
    ] {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if args[0] == "replay" {
            args.push(trace("resnet_train").to_str().unwrap().to_string());
        }
        let out = with_stdout_closed(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
    // A replay that ran out keeps its exit code and its lines on stderr
    // when the reader is gone (it exited 0, saying nothing, before), with
    // --summary's tables too (written during the replays).
    for summary in [&[][..], &["--summary"][..]] {
        let small_loop = trace("small_loop");
        let mut args = vec!["replay", "--simulate", "--compare", "--capacity", "1000"];
        args.extend_from_slice(summary);
        args.push(small_loop.to_str().unwrap());
        let out = with_stdout_closed(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{summary:?}: {err}");
        assert_eq!(err.matches("refused with no limit").count(), 5, "{err}");
    }
}
