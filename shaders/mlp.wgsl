// A two-layer MLP trained with plain SGD: y = relu(x W1 + b1) W2 + b2, loss =
// mean over the batch of sum_k (y - t)^2. Every buffer is a range handed out by
// the pool. Each entry point uses only some of the bindings below (pipelines are
// made with an automatic layout), never more than WebGPU's default of 8 storage
// buffers per stage.
//
// Each pass binds what it only reads read-only (the parameters as a uniform,
// the rest as var<storage, read>) and what it writes read_write. A tensor that
// one pass writes and a later one reads has two declarations, `name` (read) and
// `name_w` (read_write), each used by the passes that need it. WebGPU checks
// usage per buffer, so the pool keeps these apart: read-only inputs (x, t) and
// the uniform share read-only segments, the loss (only ever written) shares
// read-write segments, and tensors bound both ways get buffers of their own.
//
// Weights are stored as packed u32 words and decoded here:
//   dtype 0: f32, one value per word (bitcast);
//   dtype 1: f16, two per word (unpack2x16float);
//   dtype 2: int8, four per word, value = q / 127 * scale (per-tensor scale).
// Updates re-encode with stochastic rounding, so steps smaller than the storage
// precision still move the weights on average.

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
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [batch, d_in]
@group(0) @binding(2) var<storage, read> t: array<f32>;          // [batch, d_out]
@group(0) @binding(3) var<storage, read> w1: array<u32>;         // [d_in, hidden], packed
@group(0) @binding(4) var<storage, read> b1: array<f32>;         // [hidden]
@group(0) @binding(5) var<storage, read> w2: array<u32>;         // [hidden, d_out], packed
@group(0) @binding(6) var<storage, read> b2: array<f32>;         // [d_out]
@group(0) @binding(7) var<storage, read> h: array<f32>;          // [batch, hidden]
@group(0) @binding(8) var<storage, read> dy: array<f32>;         // [batch, d_out]
@group(0) @binding(9) var<storage, read> dh: array<f32>;         // [batch, hidden]
@group(0) @binding(10) var<storage, read> gw1: array<f32>;       // [d_in, hidden]
@group(0) @binding(11) var<storage, read> gw2: array<f32>;       // [hidden, d_out]
@group(0) @binding(12) var<storage, read> gb: array<f32>;        // [hidden + d_out]
@group(0) @binding(13) var<storage, read_write> loss: array<f32>; // [batch]
@group(0) @binding(14) var<storage, read_write> w1_w: array<u32>;
@group(0) @binding(15) var<storage, read_write> b1_w: array<f32>;
@group(0) @binding(16) var<storage, read_write> w2_w: array<u32>;
@group(0) @binding(17) var<storage, read_write> b2_w: array<f32>;
@group(0) @binding(18) var<storage, read_write> h_w: array<f32>;
@group(0) @binding(19) var<storage, read_write> dy_w: array<f32>;
@group(0) @binding(20) var<storage, read_write> dh_w: array<f32>;
@group(0) @binding(21) var<storage, read_write> gw1_w: array<f32>;
@group(0) @binding(22) var<storage, read_write> gw2_w: array<f32>;
@group(0) @binding(23) var<storage, read_write> gb_w: array<f32>;

const WG: u32 = 64u;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

fn per_word() -> u32 {
    if p.dtype == 0u { return 1u; }
    if p.dtype == 1u { return 2u; }
    return 4u;
}

fn decode(word: u32, lane: u32, scale: f32) -> f32 {
    if p.dtype == 0u {
        return bitcast<f32>(word);
    }
    if p.dtype == 1u {
        return unpack2x16float(word)[lane];
    }
    let q = i32(word << (24u - 8u * lane)) >> 24u;
    return f32(q) / 127.0 * scale;
}

fn w1_at(e: u32) -> f32 {
    let n = per_word();
    return decode(w1[e / n], e % n, p.scale1);
}

fn w2_at(e: u32) -> f32 {
    let n = per_word();
    return decode(w2[e / n], e % n, p.scale2);
}

// PCG hash: a uniform number in [0, 1) from a seed.
fn rand(seed: u32) -> f32 {
    var s = seed * 747796405u + 2891336453u;
    s = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    s = (s >> 22u) ^ s;
    return f32(s >> 8u) / 16777216.0;
}

fn encode_f16_pair(a: f32, b: f32, seed: u32) -> u32 {
    // Stochastic rounding to f16: add uniform noise of one f16 ulp centred on
    // zero, then let pack2x16float round to nearest.
    var v = vec2<f32>(a, b);
    for (var i = 0u; i < 2u; i++) {
        let m = max(abs(v[i]), 6.1e-5);
        let ulp = exp2(floor(log2(m)) - 10.0);
        v[i] = v[i] + (rand(seed * 2u + i) - 0.5) * ulp;
    }
    return pack2x16float(v);
}

fn encode(vals: vec4<f32>, scale: f32, seed: u32) -> u32 {
    if p.dtype == 0u {
        return bitcast<u32>(vals.x);
    }
    if p.dtype == 1u {
        return encode_f16_pair(vals.x, vals.y, seed);
    }
    var word = 0u;
    for (var i = 0u; i < 4u; i++) {
        let q = clamp(floor(vals[i] / scale * 127.0 + rand(seed * 4u + i)), -127.0, 127.0);
        word = word | ((u32(i32(q)) & 0xffu) << (8u * i));
    }
    return word;
}

// h = relu(x W1 + b1), one invocation per (b, j).
@compute @workgroup_size(64)
fn forward_hidden(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = index(gid, nwg);
    if idx >= p.batch * p.hidden { return; }
    let b = idx / p.hidden;
    let j = idx % p.hidden;
    var acc = b1[j];
    for (var i = 0u; i < p.d_in; i++) {
        acc += x[b * p.d_in + i] * w1_at(i * p.hidden + j);
    }
    h_w[idx] = max(acc, 0.0);
}

// y = h W2 + b2, dy = 2 (y - t) / batch and the per-sample loss; one invocation per b.
@compute @workgroup_size(64)
fn forward_output(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = index(gid, nwg);
    if b >= p.batch { return; }
    var l = 0.0;
    for (var k = 0u; k < p.d_out; k++) {
        var y = b2[k];
        for (var j = 0u; j < p.hidden; j++) {
            y += h[b * p.hidden + j] * w2_at(j * p.d_out + k);
        }
        let d = y - t[b * p.d_out + k];
        l += d * d;
        dy_w[b * p.d_out + k] = 2.0 * d / f32(p.batch);
    }
    loss[b] = l;
}

// dh = (dy W2^T) * relu'(h), one invocation per (b, j).
@compute @workgroup_size(64)
fn backward_hidden(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = index(gid, nwg);
    if idx >= p.batch * p.hidden { return; }
    let b = idx / p.hidden;
    let j = idx % p.hidden;
    if h[idx] <= 0.0 {
        dh_w[idx] = 0.0;
        return;
    }
    var acc = 0.0;
    for (var k = 0u; k < p.d_out; k++) {
        acc += dy[b * p.d_out + k] * w2_at(j * p.d_out + k);
    }
    dh_w[idx] = acc;
}

// gW2 = h^T dy and gb2 = sum_b dy, one invocation per (j, k).
@compute @workgroup_size(64)
fn grad_output(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = index(gid, nwg);
    if idx >= p.hidden * p.d_out { return; }
    let j = idx / p.d_out;
    let k = idx % p.d_out;
    var acc = 0.0;
    var bias = 0.0;
    for (var b = 0u; b < p.batch; b++) {
        let g = dy[b * p.d_out + k];
        acc += h[b * p.hidden + j] * g;
        bias += g;
    }
    gw2_w[idx] = acc;
    if j == 0u {
        gb_w[p.hidden + k] = bias;
    }
}

// gW1 = x^T dh and gb1 = sum_b dh, one invocation per (i, j).
@compute @workgroup_size(64)
fn grad_hidden(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = index(gid, nwg);
    if idx >= p.d_in * p.hidden { return; }
    let i = idx / p.hidden;
    let j = idx % p.hidden;
    var acc = 0.0;
    var bias = 0.0;
    for (var b = 0u; b < p.batch; b++) {
        let g = dh[b * p.hidden + j];
        acc += x[b * p.d_in + i] * g;
        bias += g;
    }
    gw1_w[idx] = acc;
    if i == 0u {
        gb_w[j] = bias;
    }
}

// W1 -= lr gW1, one invocation per packed word (so no two write one word).
@compute @workgroup_size(64)
fn update_w1(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let wi = index(gid, nwg);
    let n = per_word();
    let total = p.d_in * p.hidden;
    if wi * n >= total { return; }
    var v = vec4<f32>(0.0);
    for (var l = 0u; l < n; l++) {
        let e = wi * n + l;
        if e < total {
            v[l] = decode(w1_w[wi], l, p.scale1) - p.lr * gw1[e];
        }
    }
    w1_w[wi] = encode(v, p.scale1, wi * 7919u + p.step * 104729u + 1u);
}

// W2 -= lr gW2, one invocation per packed word.
@compute @workgroup_size(64)
fn update_w2(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let wi = index(gid, nwg);
    let n = per_word();
    let total = p.hidden * p.d_out;
    if wi * n >= total { return; }
    var v = vec4<f32>(0.0);
    for (var l = 0u; l < n; l++) {
        let e = wi * n + l;
        if e < total {
            v[l] = decode(w2_w[wi], l, p.scale2) - p.lr * gw2[e];
        }
    }
    w2_w[wi] = encode(v, p.scale2, wi * 6271u + p.step * 130363u + 2u);
}

// Biases stay f32: b -= lr gb.
@compute @workgroup_size(64)
fn update_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if i < p.hidden {
        b1_w[i] -= p.lr * gb[i];
    } else if i < p.hidden + p.d_out {
        b2_w[i - p.hidden] -= p.lr * gb[i];
    }
}
