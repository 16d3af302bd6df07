//! `vrampool-workload`: a real GPU workload whose tensors all come from a
//! vrampool [`Pool`]: a two-layer MLP trained with compute shaders
//! (`shaders/mlp.wgsl`: matmul, ReLU, loss, gradients, SGD update) on
//! generated data, with weights stored as f32, f16 or int8 and decoded in the
//! shader. The harness (`vrampool workload`) and the browser page both drive it.
//!
//! Like a framework, every step allocates its activations and gradients from
//! the pool and drops them at the end, so from the second step on they are
//! cache hits. [`plan`] lists those tensors, so a dry run on the simulated
//! device ([`dry_run`], [`find_batch`]) makes exactly the requests a real run makes.

use rand::{Rng, SeedableRng, rngs::SmallRng};
use vrampool::{
    Access, AllocDesc, Config, Engine, Error, Limit, Pool, PoolBuffer, PoolOptions, Request,
    SimulatedDevice, Stats,
};

/// The shader.
pub const MLP_WGSL: &str = include_str!("../../shaders/mlp.wgsl");

/// How the weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 4 bytes per weight.
    F32,
    /// 2 bytes per weight.
    F16,
    /// 1 byte per weight, with one scale per tensor.
    Int8,
}

impl Dtype {
    /// Weights per 32-bit word.
    pub fn per_word(self) -> u64 {
        match self {
            Dtype::F32 => 1,
            Dtype::F16 => 2,
            Dtype::Int8 => 4,
        }
    }
    fn code(self) -> u32 {
        match self {
            Dtype::F32 => 0,
            Dtype::F16 => 1,
            Dtype::Int8 => 2,
        }
    }
}

/// The model and how it is trained.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MlpConfig {
    /// Samples per step.
    pub batch: u32,
    /// Input features.
    pub d_in: u32,
    /// Hidden units.
    pub hidden: u32,
    /// Outputs.
    pub d_out: u32,
    /// Weight storage.
    pub dtype: Dtype,
    /// Learning rate.
    pub lr: f32,
    /// Seed of the data and the initial weights.
    pub seed: u64,
}

impl Default for MlpConfig {
    fn default() -> Self {
        MlpConfig {
            batch: 256,
            d_in: 64,
            hidden: 1024,
            d_out: 16,
            dtype: Dtype::F32,
            lr: 0.05,
            seed: 1,
        }
    }
}

/// What a tensor is to the passes, which decides where the pool puts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The parameters, bound `var<uniform>`.
    Uniform,
    /// Written by `queue.write_buffer`, only read by passes (`var<storage, read>`).
    Input,
    /// Only written by passes (`var<storage, read_write>`), then copied.
    Output,
    /// Written by one pass and read by another: bound both ways.
    Both,
    /// A MAP_READ staging buffer (the loss read back).
    Readback,
}

/// One tensor the workload allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tensor {
    /// Label shown in the pool's snapshot.
    pub label: &'static str,
    /// Bytes.
    pub size: u64,
    /// Kept for the whole run (weights), or allocated and dropped every step.
    pub persistent: bool,
    /// How the passes use it.
    pub role: Role,
}

impl MlpConfig {
    fn weight_words(&self, n: u64) -> u64 {
        n.div_ceil(self.dtype.per_word())
    }
    /// Bytes the two weight matrices take in storage.
    pub fn weight_bytes(&self) -> u64 {
        let (i, h, o) = (self.d_in as u64, self.hidden as u64, self.d_out as u64);
        // Saturating, as in `plan`: a width past any device is refused by
        // `check`, not an overflow.
        (self
            .weight_words(i * h)
            .saturating_add(self.weight_words(h * o)))
        .saturating_mul(4)
    }
    /// Bytes they would take as f32.
    pub fn f32_weight_bytes(&self) -> u64 {
        let (i, h, o) = (self.d_in as u64, self.hidden as u64, self.d_out as u64);
        (i * h).saturating_add(h * o).saturating_mul(4)
    }

    /// The largest batch whose every tensor fits `limits`: each one is bound
    /// whole (at most `max_storage_buffer_binding_size`, the parameters
    /// `max_uniform_buffer_binding_size`) and is one buffer (at most
    /// `max_buffer_size`). 0 when not even a batch of 1 fits.
    ///
    /// ```
    /// use vrampool_workload::MlpConfig;
    /// let limits = wgpu::Limits {
    ///     max_storage_buffer_binding_size: 1 << 20,
    ///     ..wgpu::Limits::default()
    /// };
    /// // h and dh: batch × 1024 hidden units × 4 bytes, in 1 MiB.
    /// assert_eq!(MlpConfig::default().largest_batch(&limits), 256);
    /// ```
    pub fn largest_batch(&self, limits: &wgpu::Limits) -> u32 {
        let at = |batch| plan(&MlpConfig { batch, ..*self });
        let mut most = u64::from(u32::MAX);
        for (t0, t1) in at(0).iter().zip(at(1)) {
            let cap = cap(t0.role, limits);
            let per_sample = t1.size - t0.size;
            most = match cap.checked_sub(t0.size) {
                None => 0,
                Some(left) => most.min(left.checked_div(per_sample).unwrap_or(u64::MAX)),
            };
        }
        most as u32
    }

    /// Checks that every tensor of this configuration fits `limits` (see
    /// [`MlpConfig::largest_batch`]): [`Error::Config`] naming the first that
    /// does not, and the largest batch that fits.
    pub fn check(&self, limits: &wgpu::Limits) -> Result<(), Error> {
        let Some(t) = plan(self)
            .into_iter()
            .find(|t| t.size > cap(t.role, limits))
        else {
            return Ok(());
        };
        let fits = self.largest_batch(limits);
        let limit = match t.role {
            Role::Uniform => "max_uniform_buffer_binding_size, max_buffer_size",
            Role::Readback => "max_buffer_size",
            _ => "max_storage_buffer_binding_size, max_buffer_size",
        };
        Err(Error::Config(format!(
            "tensor `{}` of batch {} with {} hidden units takes {} bytes, above the {} bytes the \
             device allows for it ({limit}): {}",
            t.label,
            self.batch,
            self.hidden,
            t.size,
            cap(t.role, limits),
            if fits == 0 {
                "not even a batch of 1 fits; lower the hidden width".to_string()
            } else {
                format!("a batch of at most {fits} fits")
            }
        )))
    }
}

/// The largest tensor of `role` `limits` allow: bound whole, one buffer.
fn cap(role: Role, limits: &wgpu::Limits) -> u64 {
    match role {
        Role::Uniform => limits.max_uniform_buffer_binding_size,
        Role::Readback => u64::MAX,
        // The shader counts a tensor's words in a u32.
        _ => limits
            .max_storage_buffer_binding_size
            .min(4 * u64::from(u32::MAX)),
    }
    .min(limits.max_buffer_size)
}

/// Every tensor, in the order a run allocates them: the persistent ones
/// (parameters), then the ones each step allocates and drops.
pub fn plan(c: &MlpConfig) -> Vec<Tensor> {
    let (b, i, h, o) = (
        c.batch as u64,
        c.d_in as u64,
        c.hidden as u64,
        c.d_out as u64,
    );
    // Products of two u32s fit a u64; the bytes of one (4 a word) saturate,
    // so a width past any device is refused by `check`, not an overflow.
    let t = |label, words: u64, persistent, role| Tensor {
        label,
        size: words.saturating_mul(4),
        persistent,
        role,
    };
    vec![
        t("params", PARAMS_BYTES / 4, true, Role::Uniform),
        t("w1", c.weight_words(i * h), true, Role::Both),
        t("b1", h, true, Role::Both),
        t("w2", c.weight_words(h * o), true, Role::Both),
        t("b2", o, true, Role::Both),
        t("x", b * i, false, Role::Input),
        t("t", b * o, false, Role::Input),
        t("h", b * h, false, Role::Both),
        t("dy", b * o, false, Role::Both),
        t("loss", b, false, Role::Output),
        t("dh", b * h, false, Role::Both),
        t("gw2", h * o, false, Role::Both),
        t("gw1", i * h, false, Role::Both),
        t("gb", h + o, false, Role::Both),
        t("loss readback", b, false, Role::Readback),
    ]
}

const PARAMS_BYTES: u64 = 48;

/// The request the pool makes for `t` (the pool's own mapping, with its
/// default `widen_usage`).
fn request(t: &Tensor) -> Request {
    desc(t)
        .request(PoolOptions::default().widen_usage, false)
        .expect("the workload's usages are valid")
}

/// Runs the allocation pattern of `steps` training steps on the simulated
/// device under `budget` (bytes of reserved memory): what a real run of this
/// configuration will ask of the pool, without a GPU. Returns the pool's stats,
/// or the out-of-memory error the real run would hit.
///
/// ```
/// use vrampool_workload::{MlpConfig, dry_run};
/// let stats = dry_run(&MlpConfig::default(), 64 << 20, 2)?;
/// assert!(stats.total.reserved_bytes.peak <= 64 << 20);
/// # Ok::<(), vrampool::Error>(())
/// ```
pub fn dry_run(c: &MlpConfig, budget: u64, steps: u32) -> Result<Stats, Error> {
    let config = Config {
        limit: Some(Limit::Bytes(budget)),
        ..Config::default()
    };
    let mut e = Engine::new(
        SimulatedDevice::new(budget.max(1 << 30).saturating_mul(2)),
        config,
    )?;
    let tensors = plan(c);
    let mut keep = Vec::new();
    for t in tensors.iter().filter(|t| t.persistent) {
        keep.push(e.allocate(request(t))?.id);
    }
    for _ in 0..steps {
        let mut step = Vec::new();
        for t in tensors.iter().filter(|t| !t.persistent) {
            step.push(e.allocate(request(t))?.id);
        }
        for id in step {
            e.free(id)?;
        }
    }
    Ok(e.stats())
}

/// The largest batch (up to `max_batch`) whose training steps fit `budget`
/// bytes, by bisection over [`dry_run`]; `None` if not even a batch of 1 fits.
pub fn find_batch(c: &MlpConfig, budget: u64, max_batch: u32) -> Option<u32> {
    let fits = |b: u32| dry_run(&MlpConfig { batch: b, ..*c }, budget, 2).is_ok();
    if !fits(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u32, max_batch.max(1));
    if fits(hi) {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    d_in: u32,
    hidden: u32,
    d_out: u32,
    dtype: u32,
    step: u32,
    lr: f32,
    scale1: f32,
    scale2: f32,
    pad: [u32; 3],
}

const ENTRY_POINTS: [&str; 8] = [
    "forward_hidden",
    "forward_output",
    "backward_hidden",
    "grad_output",
    "grad_hidden",
    "update_w1",
    "update_w2",
    "update_bias",
];

/// The MLP on a device: its pipelines, parameters and data generator.
pub struct Trainer {
    cfg: MlpConfig,
    pipelines: Vec<wgpu::ComputePipeline>,
    params: PoolBuffer,
    weights: [PoolBuffer; 4],
    teacher: Vec<f32>,
    rng: SmallRng,
    step: u32,
    scales: (f32, f32),
}

fn pack(values: &[f32], dtype: Dtype, scale: f32) -> Vec<u32> {
    match dtype {
        Dtype::F32 => values.iter().map(|v| v.to_bits()).collect(),
        Dtype::F16 => values
            .chunks(2)
            .map(|c| {
                let lo = half::f16::from_f32(c[0]).to_bits() as u32;
                let hi = c
                    .get(1)
                    .map_or(0, |v| half::f16::from_f32(*v).to_bits() as u32);
                lo | (hi << 16)
            })
            .collect(),
        Dtype::Int8 => values
            .chunks(4)
            .map(|c| {
                c.iter().enumerate().fold(0u32, |w, (i, v)| {
                    let q = (v / scale * 127.0).round().clamp(-127.0, 127.0) as i8;
                    w | ((q as u8 as u32) << (8 * i))
                })
            })
            .collect(),
    }
}

/// What one step reports.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepReport {
    /// Step number, from 0.
    pub step: u32,
    /// Mean over the batch of the summed squared error, if it was read back.
    pub loss: Option<f32>,
}

impl Trainer {
    /// Compiles the shader and allocates the parameters from `pool`.
    pub async fn new(pool: &Pool, cfg: MlpConfig) -> Result<Trainer, Error> {
        if cfg.batch == 0 || cfg.hidden == 0 {
            return Err(Error::Config(
                "batch and hidden must be at least 1".to_string(),
            ));
        }
        let device = pool.device();
        // Before the host's copies of the weights are made: a width past
        // the device's limits would ask the host for as much.
        cfg.check(&device.limits())?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("vrampool mlp"),
            source: wgpu::ShaderSource::Wgsl(MLP_WGSL.into()),
        });
        let pipelines = ENTRY_POINTS
            .iter()
            .map(|e| {
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(e),
                    layout: None,
                    module: &module,
                    entry_point: Some(e),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })
            .collect();
        let mut rng = SmallRng::seed_from_u64(cfg.seed);
        let (i, h, o) = (cfg.d_in as usize, cfg.hidden as usize, cfg.d_out as usize);
        let init = |rng: &mut SmallRng, n: usize, fan: usize| -> Vec<f32> {
            let a = (6.0 / fan as f32).sqrt();
            (0..n).map(|_| rng.random_range(-a..a)).collect()
        };
        let w1 = init(&mut rng, i * h, i + h);
        let w2 = init(&mut rng, h * o, h + o);
        let scale = |w: &[f32]| w.iter().fold(0f32, |m, v| m.max(v.abs())) * 2.0;
        let scales = (scale(&w1), scale(&w2));
        let teacher = (0..i * o).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let tensors = plan(&cfg);
        let mut bufs = Vec::new();
        for t in tensors.iter().filter(|t| t.persistent) {
            bufs.push(pool.alloc_async(desc(t)).await?);
        }
        let queue = pool.queue();
        let words1 = pack(&w1, cfg.dtype, scales.0);
        let words2 = pack(&w2, cfg.dtype, scales.1);
        queue.write_buffer(
            bufs[1].buffer(),
            bufs[1].offset(),
            bytemuck::cast_slice(&words1),
        );
        queue.write_buffer(bufs[2].buffer(), bufs[2].offset(), &vec![0u8; 4 * h]);
        queue.write_buffer(
            bufs[3].buffer(),
            bufs[3].offset(),
            bytemuck::cast_slice(&words2),
        );
        queue.write_buffer(bufs[4].buffer(), bufs[4].offset(), &vec![0u8; 4 * o]);
        let mut it = bufs.into_iter();
        let params = it.next().expect("params");
        let weights = [
            it.next().expect("w1"),
            it.next().expect("b1"),
            it.next().expect("w2"),
            it.next().expect("b2"),
        ];
        Ok(Trainer {
            cfg,
            pipelines,
            params,
            weights,
            teacher,
            rng,
            step: 0,
            scales,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MlpConfig {
        &self.cfg
    }

    fn batch(&mut self) -> (Vec<f32>, Vec<f32>) {
        let (b, i, o) = (
            self.cfg.batch as usize,
            self.cfg.d_in as usize,
            self.cfg.d_out as usize,
        );
        let x: Vec<f32> = (0..b * i)
            .map(|_| self.rng.random_range(-1.0..1.0))
            .collect();
        let norm = 1.0 / (i as f32).sqrt();
        let mut t = vec![0f32; b * o];
        for s in 0..b {
            for k in 0..o {
                let z: f32 = (0..i).map(|n| x[s * i + n] * self.teacher[n * o + k]).sum();
                t[s * o + k] = (z * norm).tanh();
            }
        }
        (x, t)
    }

    /// One training step: allocates the step's tensors from `pool`, records
    /// the eight passes, drops the tensors and submits through
    /// [`Pool::submit`], so the next step reuses them. With `read_loss` it
    /// waits for the GPU, returns the loss, and tells the pool (with
    /// [`Pool::submitted`]) that the staging buffer's copy was submitted:
    /// call it with no encoder of your own holding dropped pool blocks.
    pub async fn step(&mut self, pool: &Pool, read_loss: bool) -> Result<StepReport, Error> {
        let c = self.cfg;
        let device = pool.device();
        let queue = pool.queue();
        let params = Params {
            batch: c.batch,
            d_in: c.d_in,
            hidden: c.hidden,
            d_out: c.d_out,
            dtype: c.dtype.code(),
            step: self.step,
            lr: c.lr,
            scale1: self.scales.0,
            scale2: self.scales.1,
            pad: [0; 3],
        };
        queue.write_buffer(
            self.params.buffer(),
            self.params.offset(),
            bytemuck::bytes_of(&params),
        );
        let tensors = plan(&c);
        let mut step_bufs = Vec::new();
        for t in tensors.iter().filter(|t| !t.persistent) {
            step_bufs.push(pool.alloc_async(desc(t)).await?);
        }
        let [x, t, h, dy, loss, dh, gw2, gw1, gb, readback] =
            <[PoolBuffer; 10]>::try_from(step_bufs)
                .map_err(|_| Error::Config("plan lists 10 step tensors".into()))?;
        let (xs, ts) = self.batch();
        queue.write_buffer(x.buffer(), x.offset(), bytemuck::cast_slice(&xs));
        queue.write_buffer(t.buffer(), t.offset(), bytemuck::cast_slice(&ts));
        // Binding n of shaders/mlp.wgsl: the read views (1..=12), the loss
        // (13), then the read_write views of the tensors bound both ways.
        let [w1, b1, w2, b2] = &self.weights;
        let bindings: [&PoolBuffer; 24] = [
            &self.params,
            &x,
            &t,
            w1,
            b1,
            w2,
            b2,
            &h,
            &dy,
            &dh,
            &gw1,
            &gw2,
            &gb,
            &loss,
            w1,
            b1,
            w2,
            b2,
            &h,
            &dy,
            &dh,
            &gw1,
            &gw2,
            &gb,
        ];
        // Which bindings each entry point uses (its automatic layout has only those).
        const USES: [&[u32]; 8] = [
            &[0, 1, 3, 4, 18],
            &[0, 2, 5, 6, 7, 13, 19],
            &[0, 5, 7, 8, 20],
            &[0, 7, 8, 22, 23],
            &[0, 1, 9, 21, 23],
            &[0, 10, 14],
            &[0, 11, 16],
            &[0, 12, 15, 17],
        ];
        let (b, i, hd, o) = (c.batch, c.d_in, c.hidden, c.d_out);
        let per = c.dtype.per_word() as u32;
        let work: [u32; 8] = [
            b * hd,
            b,
            b * hd,
            hd * o,
            i * hd,
            (i * hd).div_ceil(per),
            (hd * o).div_ceil(per),
            hd + o,
        ];
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("vrampool mlp step"),
        });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("vrampool mlp"),
                timestamp_writes: None,
            });
            for (k, pipeline) in self.pipelines.iter().enumerate() {
                let entries: Vec<wgpu::BindGroupEntry> = USES[k]
                    .iter()
                    .map(|&n| wgpu::BindGroupEntry {
                        binding: n,
                        resource: bindings[n as usize].binding(),
                    })
                    .collect();
                let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(ENTRY_POINTS[k]),
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &group, &[]);
                let groups = work[k].div_ceil(64);
                let (gx, gy) = if groups > 65535 {
                    (65535, groups.div_ceil(65535))
                } else {
                    (groups.max(1), 1)
                };
                pass.dispatch_workgroups(gx, gy, 1);
            }
        }
        let mut result = StepReport {
            step: self.step,
            loss: None,
        };
        if read_loss {
            enc.copy_buffer_to_buffer(
                loss.buffer(),
                loss.offset(),
                readback.buffer(),
                readback.offset(),
                4 * b as u64,
            );
        }
        // The step's tensors are dropped before the submit, as a framework's
        // temporaries are: the pool keeps them pending, and `Pool::submit`
        // makes them reusable once the commands using them are submitted.
        drop((x, t, h, dy, loss, dh, gw2, gw1, gb));
        let readback = read_loss.then_some(readback);
        pool.submit([enc.finish()]);
        if let Some(readback) = readback {
            let slice = readback
                .buffer()
                .slice(readback.offset()..readback.offset() + 4 * b as u64);
            let (tx, rx) = futures_channel::oneshot::channel();
            slice.map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            #[cfg(not(target_arch = "wasm32"))]
            let _ = device.poll(wgpu::PollType::wait_indefinitely());
            rx.await
                .map_err(|_| Error::Device("the device dropped the loss readback".into()))?
                .map_err(|e| Error::Device(format!("reading the loss back: {e}")))?;
            {
                let data = slice
                    .get_mapped_range()
                    .map_err(|e| Error::Device(format!("reading the loss back: {e}")))?;
                let per_sample: &[f32] = bytemuck::cast_slice(&data);
                result.loss = Some(per_sample.iter().sum::<f32>() / b as f32);
            }
            readback.buffer().unmap();
            drop(readback);
            // Its copy was in the command buffer submitted above, and nothing
            // else is recorded: it can be reused at once.
            pool.submitted();
        }
        self.step += 1;
        Ok(result)
    }
}

/// What the pool is asked for `t`.
pub fn desc(t: &Tensor) -> AllocDesc<'static> {
    match t.role {
        Role::Uniform => AllocDesc::uniform(t.size),
        Role::Input => AllocDesc::storage(t.size).access(Access::ReadOnly),
        Role::Output => AllocDesc::storage(t.size).access(Access::ReadWrite),
        Role::Both => AllocDesc::storage(t.size),
        Role::Readback => AllocDesc::readback(t.size),
    }
    .label(t.label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vulkan's caps on an H200: wgpu binds at most 2^31 − 1 bytes.
    fn h200() -> wgpu::Limits {
        wgpu::Limits {
            max_storage_buffer_binding_size: (1 << 31) - 1,
            max_buffer_size: 1 << 32,
            ..wgpu::Limits::default()
        }
    }

    #[test]
    fn a_batch_past_the_devices_binding_size_is_refused_naming_what_fits() {
        // h and dh are batch × hidden × 4 bytes, bound whole: a batch the
        // simulated dry run accepts made wgpu panic in create_bind_group.
        let c = MlpConfig {
            batch: 600_000,
            ..MlpConfig::default()
        };
        assert_eq!(c.largest_batch(&h200()), 524_287);
        let e = c.check(&h200()).unwrap_err().to_string();
        assert!(
            e.contains("tensor `h` of batch 600000")
                && e.contains("a batch of at most 524287 fits"),
            "{e}"
        );
        MlpConfig {
            batch: 524_287,
            ..c
        }
        .check(&h200())
        .unwrap();
        // A width no batch fits: said before any host vector is made.
        let wide = MlpConfig {
            batch: 1,
            hidden: u32::MAX,
            ..c
        };
        assert_eq!(wide.largest_batch(&h200()), 0);
        let e = wide.check(&h200()).unwrap_err().to_string();
        assert!(
            e.contains("tensor `w1`") && e.contains("not even a batch of 1"),
            "{e}"
        );
        // Batch and width both at u32::MAX: their product's bytes pass a
        // u64 (an overflow panic in debug builds before), refused all the same.
        let huge = MlpConfig {
            batch: u32::MAX,
            hidden: u32::MAX,
            ..c
        };
        let e = huge.check(&h200()).unwrap_err().to_string();
        assert!(e.contains("lower the hidden width"), "{e}");
        assert!(huge.weight_bytes() > 1 << 40);
    }
}
