// Tag-and-verify: every live pool block is bound as `data` (its offset and
// size), written with a pattern unique to the block, then read back by the
// verify pass. If two live blocks overlapped, the later write would clobber
// the earlier block's pattern and the verify pass would count mismatches.

struct Params {
    tag: u32,
    words: u32,
}

@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var<storage, read_write> errors: array<atomic<u32>>;

fn pattern(tag: u32, i: u32) -> u32 {
    return tag * 2654435761u + i;
}

@compute @workgroup_size(64)
fn write_tags(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if (i < params.words) {
        data[i] = pattern(params.tag, i);
    }
}

@compute @workgroup_size(64)
fn verify_tags(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if (i < params.words && data[i] != pattern(params.tag, i)) {
        atomicAdd(&errors[0], 1u);
    }
}

// Counts non-zero words of a block (in errors[1]): zero-on-reuse must leave none.
@compute @workgroup_size(64)
fn count_nonzero(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 65535u * 64u;
    if (i < params.words && data[i] != 0u) {
        atomicAdd(&errors[1], 1u);
    }
}
