//! `cargo xtask`: builds the browser page (cargo for wasm32 + wasm-bindgen,
//! as wgpu's own `cargo xtask run-wasm` does) and serves it on 127.0.0.1.
//! It installs what it lacks: the wasm32 target, and a wasm-bindgen-cli of the
//! exact version in Cargo.lock.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build and serve the vrampool page")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the page and serve it on http://127.0.0.1:PORT/ until interrupted.
    Serve {
        /// Port (0 picks a free one).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Serve what is already built.
        #[arg(long)]
        no_build: bool,
    },
    /// Build the page into target/site.
    Build,
    /// Print the wasm's size, raw and gzipped.
    Size,
    /// Regenerate web/samples from data/traces (every size ÷ 64).
    Samples,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .to_path_buf()
}

/// Cargo's target directory for this workspace (`CARGO_TARGET_DIR`, a
/// config's `build.target-dir`, or `target/`), as `cargo metadata` says.
fn target_dir() -> Result<PathBuf> {
    let out = Command::new("cargo")
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata's JSON")?;
    let dir = meta["target_directory"]
        .as_str()
        .context("cargo metadata gave no target_directory")?;
    Ok(PathBuf::from(dir))
}

/// Where the built page goes: `site/` in the target directory.
fn site() -> Result<PathBuf> {
    Ok(target_dir()?.join("site"))
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Serve { port, no_build } => {
            if !no_build {
                build()?;
            }
            serve(port)
        }
        Cmd::Build => build(),
        Cmd::Size => {
            size()?;
            Ok(())
        }
        Cmd::Samples => samples(),
    }
}

fn status(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let s = cmd
        .status()
        .with_context(|| format!("cannot run {shown}"))?;
    if !s.success() {
        bail!("{shown} failed ({s})");
    }
    Ok(())
}

/// The wasm-bindgen version Cargo.lock pins (the CLI must match it exactly).
fn locked_wasm_bindgen() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|v| v.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    bail!("Cargo.lock has no wasm-bindgen package")
}

fn ensure_tools() -> Result<String> {
    let targets = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match targets {
        Ok(o)
            if String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == "wasm32-unknown-unknown") => {}
        Ok(_) => {
            eprintln!("installing the wasm32-unknown-unknown target (rustup)");
            status(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))?;
        }
        Err(_) => eprintln!(
            "warning: rustup not found; the wasm32-unknown-unknown target must be installed"
        ),
    }
    let want = locked_wasm_bindgen()?;
    // What `wasm-bindgen --version` on PATH says, if it runs.
    let on_path = || {
        Command::new("wasm-bindgen")
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let have = on_path();
    if have.as_deref() != Some(&format!("wasm-bindgen {want}")) {
        eprintln!(
            "installing wasm-bindgen-cli {want} to match Cargo.lock (found: {}); this takes several minutes once",
            have.as_deref().unwrap_or("none")
        );
        // --locked first: the crate's own lockfile, not the newest
        // dependencies of the day (which may need a newer Rust than this
        // machine has). A registry mirror may lack a version that lockfile
        // names (one without webpki-roots 1.0.11 refused 0.2.130's), so
        // then the newest dependencies it has.
        let install = |locked: bool| {
            let mut c = Command::new("cargo");
            c.args(["install", "wasm-bindgen-cli", "--version", &want]);
            if locked {
                c.arg("--locked");
            }
            status(&mut c)
        };
        if let Err(locked) = install(true) {
            eprintln!("{locked:#}; trying again with the newest dependencies the registry has");
            install(false)
                .with_context(|| format!("after the locked install failed too: {locked:#}"))?;
        }
        let found = on_path();
        if found.as_deref() != Some(&format!("wasm-bindgen {want}")) {
            bail!(
                "installed wasm-bindgen-cli {want}, but `wasm-bindgen` on PATH says {}: put \
                 cargo's bin folder ($CARGO_HOME/bin, usually ~/.cargo/bin) first on PATH",
                found.as_deref().unwrap_or("nothing")
            );
        }
    }
    Ok(want)
}

fn build() -> Result<()> {
    ensure_tools()?;
    let root = root();
    status(Command::new("cargo").current_dir(&root).args([
        "build",
        "-p",
        "vrampool-web",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        "wasm-release",
    ]))?;
    let built = target_dir()?.join("wasm32-unknown-unknown/wasm-release/vrampool_web.wasm");
    let site = site()?;
    std::fs::create_dir_all(site.join("pkg"))
        .with_context(|| format!("creating {}", site.join("pkg").display()))?;
    let bindgen = |wasm: &Path| -> Result<()> {
        status(Command::new("wasm-bindgen").args([
            "--target",
            "web",
            "--no-typescript",
            // Function names are half the module and nothing reads them (a
            // panic still prints its message through console_error_panic_hook).
            "--remove-name-section",
            "--remove-producers-section",
            "--out-dir",
            site.join("pkg").to_str().context("UTF-8 path")?,
            wasm.to_str().context("UTF-8 path")?,
        ]))
    };
    // wasm-bindgen reads the module's descriptors by interpreting them, which
    // it does not promise for an optimized module: where it (or wasm-opt)
    // fails, the page is built from cargo's module, 5 KB larger.
    match optimize(&built).and_then(|optimized| bindgen(&optimized)) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("warning: {e:#}; building the page without wasm-opt (5 KB larger gzipped)");
            bindgen(&built)?;
        }
    }
    std::fs::copy(root.join("index.html"), site.join("index.html"))
        .context("copying index.html")?;
    std::fs::create_dir_all(site.join("samples"))
        .with_context(|| format!("creating {}", site.join("samples").display()))?;
    let samples = root.join("web/samples");
    for entry in std::fs::read_dir(&samples)
        .with_context(|| format!("reading the page's samples in {}", samples.display()))?
    {
        let p = entry?.path();
        let to = site.join("samples").join(p.file_name().context("a file")?);
        std::fs::copy(&p, &to)
            .with_context(|| format!("copying {} to {}", p.display(), to.display()))?;
    }
    size()?;
    Ok(())
}

/// cargo's module `built` run through binaryen's `wasm-opt`, for
/// wasm-bindgen: the path of the optimized module. wasm-pack and trunk run it
/// too; `scripts/test.sh` installs Debian's `binaryen`. An error where it is
/// not on PATH or fails (the caller then builds the page without it).
///
/// Before wasm-bindgen, not after as wasm-pack does: binaryen 108 (Debian
/// 12's) rewrites the table of JS references that wasm-bindgen adds as a
/// table of functions, and the page then fails to start ("WebAssembly.Table.set():
/// Argument 1 is invalid for table"; binaryen 132 keeps it). rustc's module has
/// no such table yet.
///
/// `-O1 --converge`, not `-Oz`: what the page is held to is its gzipped size,
/// and binaryen's size levels shrink the raw module but gzip worse than they
/// found it. Measured on 2026-12-07 (d4233dc, binaryen 108, wasm-bindgen
/// after it, gzip -9): 398 286 B without it; `-O1 --converge` 392 684 here,
/// 393 599 B by this tool's own gzip (398 833 without it); run after
/// wasm-bindgen instead (where 108 breaks the page), `-O1 --converge`
/// 391 893, `-O1` 392 828, `-Os` 421 009, `-Oz` 422 210, and binaryen 132
/// no better. The features are those rustc's wasm32 target enables by default.
fn optimize(built: &Path) -> Result<PathBuf> {
    match Command::new("wasm-opt").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => bail!("wasm-opt (binaryen) does not run here (Debian: apt-get install binaryen)"),
    }
    // The same file name in a folder of its own: wasm-bindgen names the
    // page's files after it.
    let out = built.with_file_name("opt");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let optimized = out.join(built.file_name().context("a file name")?);
    status(Command::new("wasm-opt").args([
        "-O1",
        "--converge",
        "--enable-bulk-memory",
        "--enable-sign-ext",
        "--enable-nontrapping-float-to-int",
        "--enable-mutable-globals",
        "--enable-reference-types",
        "--enable-multivalue",
        built.to_str().context("UTF-8 path")?,
        "-o",
        optimized.to_str().context("UTF-8 path")?,
    ]))?;
    Ok(optimized)
}

/// Prints and returns (raw, gzipped) bytes of the built wasm.
fn size() -> Result<(u64, u64)> {
    let path = site()?.join("pkg/vrampool_web_bg.wasm");
    let bytes = std::fs::read(&path)
        .with_context(|| format!("{} is missing: run `cargo xtask build`", path.display()))?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&bytes)?;
    let zipped = gz.finish()?.len() as u64;
    println!(
        "wasm: {} bytes raw, {} bytes gzipped ({:.0} KB)",
        bytes.len(),
        zipped,
        zipped as f64 / 1000.0
    );
    Ok((bytes.len() as u64, zipped))
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("gz") => "application/gzip",
        _ => "application/octet-stream",
    }
}

fn serve(port: u16) -> Result<()> {
    let site = site()?;
    if !site.join("index.html").exists() {
        bail!("{} is not built: run `cargo xtask build`", site.display());
    }
    let server = tiny_http::Server::http(("127.0.0.1", port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let addr = server.server_addr().to_ip().context("an IP address")?;
    println!("vrampool page: http://{addr}/  (Ctrl-C stops)");
    std::io::stdout().flush()?;
    for req in server.incoming_requests() {
        let url = req.url().split('?').next().unwrap_or("/").to_string();
        let rel = url.trim_start_matches('/');
        let rel = if rel.is_empty() { "index.html" } else { rel };
        let path = site.join(rel);
        let inside = path
            .canonicalize()
            .ok()
            .filter(|p| p.starts_with(site.canonicalize().unwrap_or_default()));
        let response = match inside.and_then(|p| std::fs::read(&p).ok().map(|b| (p, b))) {
            Some((p, body)) => tiny_http::Response::from_data(body).with_header(
                tiny_http::Header::from_bytes("Content-Type", content_type(&p))
                    .expect("valid header"),
            ),
            None => tiny_http::Response::from_data(b"not found".to_vec()).with_status_code(404),
        };
        let _ = req.respond(response);
    }
    Ok(())
}

/// Writes each shared trace with every size divided by 64 (so it fits WebGPU's
/// 256 MiB max_buffer_size and a browser's memory), as gzip CSV.
fn samples() -> Result<()> {
    let from = root().join("data/traces");
    let to = root().join("web/samples");
    std::fs::create_dir_all(&to)?;
    for name in ["gpt_train", "resnet_train", "batch_sweep"] {
        let t = vrampool::Trace::open(from.join(format!("{name}.csv.gz")))?.scaled(64);
        let mut out = String::from(vrampool::trace::HEADER);
        out.push('\n');
        for e in &t.events {
            let action = match e.action {
                vrampool::trace::Action::Allocate => "allocate",
                vrampool::trace::Action::Free => "free",
            };
            out.push_str(&format!("0,0,{action},{:#x},{},0x0\n", e.pointer, e.size));
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(out.as_bytes())?;
        let path = to.join(format!("{name}.csv.gz"));
        std::fs::write(&path, gz.finish()?)?;
        println!(
            "{}: {} events, peak live {} bytes",
            path.display(),
            t.events.len(),
            t.peak_live
        );
    }
    Ok(())
}
