// Decode attention over the FP8 (e4m3) paged KV cache of the in-flight engine, on the tensor cores' mma.sync.
//
// What it computes is code/llm/paged_attention.py's decode_attention_reference: for every (slot, key/value head)
// the ROWS = beams x GROUP query rows attend to the slot's shared prompt keys and to each beam's own generated keys
// (through the ancestry table), softmax in float32.
//
// Why a CUDA kernel beside the Triton one: Triton lays a tile out as [16 query rows, keys] and widens each e4m3 key
// through registers it chooses; at GPT-J's four beams three of the sixteen rows' work is padding and the kernel
// takes 255 registers, so an SM holds two programs and waits on their loads (2.7 TB/s of the H200's 4.8). Here
// the layout is chosen so that no byte is moved twice:
//
// - Scores S[row, key] = Q K^T with Q as the 16-row A operand (rows >= ROWS zero) and each key's bytes as the B
//   operand, read straight from shared memory: the head dimension is permuted (lane c of a quad owns dims
//   c*D/4 .. c*D/4 + D/4 - 1, four a k-step) identically in Q and K, which leaves the dot products unchanged.
// - The scores' accumulator fragment (row g, keys 2c, 2c+1) is, after exp2, exactly the B operand of the values'
//   product O^T = V^T P^T (keys 2c, 2c+1 of column g): no shuffle between the two products.
// - O^T has the head dimension as its 16 rows (lane group g owns dims g*D/8 .. g*D/8 + D/8 - 1, permuted again)
//   and the query rows as its 8 columns, so its accumulator is D/16 x 4 floats a lane, half of them real.
// - Each warp streams its own tiles of 16 keys through a ring of STAGES shared-memory buffers filled by cp.async
//   (16-byte copies, zero-filled past the end), swizzled so that each quarter-warp's 16-byte reads hit distinct
//   banks. A block's WARPS warps take interleaved tiles of one (slot, head, split) and merge their softmax states
//   at the end through shared memory.
//
// Splits: block z of SPLITS takes an equal run of whole ALIGN blocks of the prompt (the last splits may get none),
// the last split also the generated keys, and writes its unnormalised state to the workspace that
// paged_attention.py's Triton _merge_kernel combines (the same rule and layout as _decode_split_kernel).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace {

struct DecodeParams {
  const void* q;         // [slots * beams, q_heads, D], bf16 or fp16
  const uint8_t* pk;     // the layer's prompt keys [pages, page, heads, D], e4m3
  const uint8_t* pv;
  const int32_t* table;  // [slots, pages_per_slot]
  const int32_t* lengths;
  const uint8_t* gk;     // the layer's generated keys [slots, beams, max_new, heads, D], e4m3
  const uint8_t* gv;
  const int32_t* ancestry;  // [slots, beams, max_new]
  const int64_t* counts;    // generated keys in the cache a slot, the current one included
  void* out;                // [slots * beams, q_heads, D], q's dtype (SPLITS 1)
  float* acc;               // [splits, slots * beams, q_heads, D] (SPLITS > 1)
  float* stats;             // [2, splits, slots * beams, q_heads]
  int64_t stride_q_row, stride_q_head;
  int64_t stride_k_page, stride_k_pos, stride_k_head, stride_table;
  int64_t stride_g_slot, stride_g_beam, stride_g_col, stride_g_head;
  int64_t stride_a_slot, stride_a_beam;
  int64_t stride_o_row, stride_o_head;
  int64_t stride_w_split, stride_w_row, stride_w_head, stride_s_kind, stride_s_split, stride_s_row;
  float scale_log2;  // 1/sqrt(D) x log2(e) x the layer's key scale
  float v_scale;
  int32_t splits, align, page;
  int32_t heads_first;  // grid x runs over heads (a slot's heads side by side, reading adjacent bytes), else slots
};
static_assert(sizeof(DecodeParams) == 280, "code/llm/cuda_decode.py's DecodeParams and PARAMS_BYTES mirror it");

constexpr int TILE = 16;  // keys a tile: two n8 blocks of scores, one k16 step of the values' product

// The two e4m3 values in the low (high) 16 bits of a word as an f16x2, the lower byte in the lower half.
__device__ __forceinline__ uint32_t low_pair(uint32_t word) {
  uint32_t out;
  asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(out) : "r"(word));
  return out;
}

__device__ __forceinline__ uint32_t high_pair(uint32_t word) {
  uint32_t out;
  asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(out) : "r"(word));
  return out;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void copy16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The 16-byte chunk of a key row where chunk `ch` of row `row` is stored. Key rows are read by a quarter-warp as
// rows g (two of them) x chunks of lane c's quarter of the head; value rows as rows 2c (four of them) x lane group
// g's eighth. Each swizzle spreads one quarter-warp's eight reads over the eight 16-byte bank groups.
__device__ __forceinline__ int key_chunk(int row, int ch) {
  return ch ^ ((ch >> 2) & 2) ^ (row & 1);
}

template <int D>
__device__ __forceinline__ int value_chunk(int row, int ch) {
  if constexpr (D == 256) {
    return ch ^ (((row >> 1) & 1) | (((row >> 2) & 1) << 2));
  } else {
    return ch ^ (((row >> 1) & 3) << 1);
  }
}

// Where a block's keys come from: its prompt run [start, end) in tiles of 16 keys, then (last split only) the
// generated columns, COLS of each beam a tile (key j of a tile is column first + j % COLS of beam j / COLS).
template <int BEAMS>
struct KeyRange {
  static constexpr int BEAMS_P2 = BEAMS <= 1 ? 1 : BEAMS <= 2 ? 2 : BEAMS <= 4 ? 4 : BEAMS <= 8 ? 8 : 16;
  static constexpr int COLS = TILE / BEAMS_P2;
  int start, end, generated;
  __device__ int prompt_tiles() const { return end > start ? (end - start + TILE - 1) / TILE : 0; }
  __device__ int tiles() const { return prompt_tiles() + (generated + COLS - 1) / COLS; }
};

// The block's page numbers and ancestry rows are staged in shared memory once, so a tile's copies wait on no
// global load; a range of more pages or generated ids than these reads them from global memory instead.
constexpr int STAGED_PAGES = 256;
constexpr int STAGED_IDS = 512;


template <int D, int BEAMS, int GROUP, int WARPS, int STAGES, typename T>
__device__ __forceinline__ void decode_block(const DecodeParams& p) {
  constexpr int ROWS = BEAMS * GROUP;
  static_assert(ROWS <= 8, "a block's query rows (beams x group) fill at most the 8 columns of the values' product");
  static_assert(D == 128 || D == 256, "head_dim 128 or 256");
  constexpr int KSTEPS = D / 16;          // k16 steps of the scores' product
  constexpr int MTILES = D / 16;          // m16 tiles of the values' product
  constexpr int QUARTER = D / 4;          // dims lane c owns in the scores' product
  constexpr int EIGHTH = D / 8;           // dims lane group g owns in the values' product
  constexpr int ROW_CHUNKS = D / 16;      // 16-byte chunks of a key row (lanes that copy one row)
  constexpr int TILE_BYTES = TILE * D;    // keys (or values) of a tile
  using Range = KeyRange<BEAMS>;

  extern __shared__ __align__(128) uint8_t smem[];
  const int slot = p.heads_first ? blockIdx.y : blockIdx.x, head = p.heads_first ? blockIdx.x : blockIdx.y;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // The block's keys.
  const int n = p.lengths[slot];
  const int chunk = (n + p.splits * p.align - 1) / (p.splits * p.align) * p.align;
  Range range;
  range.start = min(split * chunk, n);
  range.end = min(range.start + chunk, n);
  const bool last = split == p.splits - 1;
  range.generated = last ? max(static_cast<int>(p.counts[slot]), 1) : 0;
  const int tiles = range.tiles();
  const int prompt_tiles = range.prompt_tiles();

  // Stage the range's page numbers and the generated columns' ancestry rows.
  constexpr int RING_BYTES = WARPS * STAGES * 2 * TILE_BYTES;  // the warps' tile buffers
  constexpr int MERGE_BYTES = WARPS * ROWS * (D + 2) * 4;       // the warps' states, merged at the end
  constexpr int WORK_BYTES = RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES;
  int32_t* staged_pages = reinterpret_cast<int32_t*>(smem + WORK_BYTES);
  int32_t* staged_ids = staged_pages + STAGED_PAGES;
  const int first_page = range.start / p.page;
  const int range_pages = range.end > range.start ? (range.end - 1) / p.page - first_page + 1 : 0;
  const bool pages_staged = range_pages <= STAGED_PAGES;
  const bool ids_staged = range.generated * BEAMS <= STAGED_IDS;
  if (pages_staged) {
    for (int i = threadIdx.x; i < range_pages; i += WARPS * 32) {
      staged_pages[i] = p.table[slot * p.stride_table + first_page + i];
    }
  }
  if (ids_staged) {
    for (int i = threadIdx.x; i < range.generated * BEAMS; i += WARPS * 32) {
      staged_ids[i] = p.ancestry[slot * p.stride_a_slot + (i / range.generated) * p.stride_a_beam +
                                 i % range.generated];
    }
  }
  __syncthreads();

  // Query row g (zero past ROWS) as A fragments: step s holds dims c*QUARTER + 4s .. + 3.
  uint32_t qa[KSTEPS][2];
  {
    const bool live = g < ROWS;
    const T* q = static_cast<const T*>(p.q) + (int64_t)(slot * BEAMS + (live ? g / GROUP : 0)) * p.stride_q_row +
                 (int64_t)(head * GROUP + (live ? g % GROUP : 0)) * p.stride_q_head + c * QUARTER;
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
      const float x0 = live ? static_cast<float>(q[4 * s]) : 0.f, x1 = live ? static_cast<float>(q[4 * s + 1]) : 0.f;
      const float x2 = live ? static_cast<float>(q[4 * s + 2]) : 0.f, x3 = live ? static_cast<float>(q[4 * s + 3]) : 0.f;
      qa[s][0] = pack_half2(x0, x1);
      qa[s][1] = pack_half2(x2, x3);
    }
  }

  float o[MTILES][4];
#pragma unroll
  for (int m = 0; m < MTILES; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;
  float row_max = -INFINITY, row_sum = 0.f;  // row g's running max (base 2) and this lane's part of its sum

  uint8_t* ring = smem + warp * STAGES * 2 * TILE_BYTES;
  const uint32_t ring_addr = static_cast<uint32_t>(__cvta_generic_to_shared(ring));

  // Copies this warp's k-th tile into stage k % STAGES: lane l copies chunk l % ROW_CHUNKS of rows
  // l / ROW_CHUNKS + r0. A prompt tile lies within one page (ranges start at multiples of ALIGN, which pages and
  // tiles divide), so it takes one page number and one base address.
  constexpr int ROWS_PER_PASS = 32 / ROW_CHUNKS;
  const int ch = lane % ROW_CHUNKS, lane_row = lane / ROW_CHUNKS;
  const int gen_stride_beam = static_cast<int>(p.stride_g_beam), gen_stride_col = static_cast<int>(p.stride_g_col);
  const int key_stride = static_cast<int>(p.stride_k_pos);
  auto issue = [&](int k) {
    const int tile = warp + k * WARPS;
    const uint32_t stage = ring_addr + (k % STAGES) * 2 * TILE_BYTES;
    if (tile < prompt_tiles) {
      const int first = range.start + tile * TILE;
      const int page_index = first / p.page;
      const int64_t page = pages_staged ? staged_pages[page_index - first_page]
                                        : p.table[slot * p.stride_table + page_index];
      const int64_t base = page * p.stride_k_page + (int64_t)(first - page_index * p.page) * p.stride_k_pos +
                           head * p.stride_k_head + ch * 16;
      const uint8_t *kbase = p.pk + base, *vbase = p.pv + base;
#pragma unroll
      for (int r0 = 0; r0 < TILE; r0 += ROWS_PER_PASS) {
        const int row = r0 + lane_row;
        const bool valid = first + row < range.end;
        copy16(stage + row * D + key_chunk(row, ch) * 16, kbase + row * key_stride, valid);
        copy16(stage + TILE_BYTES + row * D + value_chunk<D>(row, ch) * 16, vbase + row * key_stride, valid);
      }
    } else {
      const int first = (tile - prompt_tiles) * Range::COLS;
      const int64_t base = slot * p.stride_g_slot + head * p.stride_g_head + ch * 16;
      const uint8_t *kbase = p.gk + base, *vbase = p.gv + base;
#pragma unroll
      for (int r0 = 0; r0 < TILE; r0 += ROWS_PER_PASS) {
        const int row = r0 + lane_row;
        const int owner = row / Range::COLS;
        const int col = first + row % Range::COLS;
        const bool valid = owner < BEAMS && col < range.generated;
        int source = 0;
        if (valid) {
          source = ids_staged ? staged_ids[owner * range.generated + col]
                              : p.ancestry[slot * p.stride_a_slot + owner * p.stride_a_beam + col];
        }
        const int offset = valid ? source * gen_stride_beam + col * gen_stride_col : 0;  // no address past the slot
        copy16(stage + row * D + key_chunk(row, ch) * 16, kbase + offset, valid);
        copy16(stage + TILE_BYTES + row * D + value_chunk<D>(row, ch) * 16, vbase + offset, valid);
      }
    }
  };

  const int mine = tiles > warp ? (tiles - warp + WARPS - 1) / WARPS : 0;
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    if (k < mine) issue(k);
    commit();
  }
  for (int k = 0; k < mine; ++k) {
    // The tile STAGES - 1 ahead goes into the stage the previous iteration read (its reads ended at its
    // __syncwarp), so STAGES - 1 tiles stay in flight while this one is computed.
    if (k + STAGES - 1 < mine) issue(k + STAGES - 1);
    commit();
    wait_groups<STAGES - 1>();
    __syncwarp();
    const int tile = warp + k * WARPS;
    const uint8_t* keys = ring + (k % STAGES) * 2 * TILE_BYTES;
    const uint8_t* values = keys + TILE_BYTES;

    // Scores of row g against keys t*8 + 2c, t*8 + 2c + 1 (t = 0, 1): sc[t][0], sc[t][1].
    // Two accumulators a block of keys (even and odd k-steps) halve the chain of dependent mma.
    float sc[2][4], odd[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[t][e] = odd[t][e] = 0.f;
      const int row = t * 8 + g;
#pragma unroll
      for (int i = 0; i < QUARTER / 16; ++i) {
        const uint4 word = *reinterpret_cast<const uint4*>(keys + row * D + key_chunk(row, c * (QUARTER / 16) + i) * 16);
        const uint32_t w[4] = {word.x, word.y, word.z, word.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int s = i * 4 + j;  // dims c*QUARTER + 4s .. + 3
          mma16816(j % 2 ? odd[t] : sc[t], qa[s][0], 0u, qa[s][1], 0u, low_pair(w[j]), high_pair(w[j]));
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[t][e] += odd[t][e];
    }

    // Masks: which of the four keys row g attends to.
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = (e >> 1) * 8 + 2 * c + (e & 1);
      bool ok;
      if (tile < prompt_tiles) {
        ok = range.start + tile * TILE + j < range.end;
      } else {
        const int owner = j / Range::COLS;
        const int col = (tile - prompt_tiles) * Range::COLS + j % Range::COLS;
        ok = owner < BEAMS && col < range.generated && owner == g / GROUP;
      }
      x[e] = ok ? sc[e >> 1][e & 1] * p.scale_log2 : -INFINITY;
    }
    float tile_max = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max, tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max;  // a row that has seen no key yet stays at zero
    const float alpha = exp2f(row_max - base);
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) pr[e] = exp2f(x[e] - base);
    row_sum = row_sum * alpha + (pr[0] + pr[1]) + (pr[2] + pr[3]);
    row_max = new_max;
    const uint32_t pb0 = pack_half2(pr[0], pr[1]), pb1 = pack_half2(pr[2], pr[3]);

    // O^T columns 2c, 2c + 1 are rows 2c, 2c + 1: their rescaling factors live in lane groups 2c and 2c + 1.
    const float alpha0 = __shfl_sync(0xffffffffu, alpha, 8 * c);
    const float alpha1 = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);
    // Once every row's maximum has settled (alpha exactly 1), the accumulator needs no rescaling; padding rows
    // (2c, 2c + 1 >= ROWS), whose alpha stays 0 over masked tiles, do not count.
    if (__any_sync(0xffffffffu, (2 * c < ROWS && alpha0 != 1.f) || (2 * c + 1 < ROWS && alpha1 != 1.f))) {
#pragma unroll
      for (int m = 0; m < MTILES; ++m) {
        o[m][0] *= alpha0;
        o[m][1] *= alpha1;
        o[m][2] *= alpha0;
        o[m][3] *= alpha1;
      }
    }

    // Values: rows 2c, 2c+1, 2c+8, 2c+9 of the tile, lane group g's eighth of the head.
#pragma unroll
    for (int i = 0; i < EIGHTH / 16; ++i) {
      uint4 v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = 2 * c + (r & 1) + (r >> 1) * 8;
        v[r] = *reinterpret_cast<const uint4*>(values + row * D + value_chunk<D>(row, g * (EIGHTH / 16) + i) * 16);
      }
      const uint32_t w0[4] = {v[0].x, v[0].y, v[0].z, v[0].w}, w1[4] = {v[1].x, v[1].y, v[1].z, v[1].w};
      const uint32_t w8[4] = {v[2].x, v[2].y, v[2].z, v[2].w}, w9[4] = {v[3].x, v[3].y, v[3].z, v[3].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // word j of the chunk: dims g*EIGHTH + i*16 + 4j .. + 3, the m16 tiles m0 and m0 + 1
        const int m0 = (i * 16 + 4 * j) / 2;
        const uint32_t lo_a = __byte_perm(w0[j], w1[j], 0x5140), hi_a = __byte_perm(w0[j], w1[j], 0x7362);
        const uint32_t lo_b = __byte_perm(w8[j], w9[j], 0x5140), hi_b = __byte_perm(w8[j], w9[j], 0x7362);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t a = h ? hi_a : lo_a, b = h ? hi_b : lo_b;
          mma16816(o[m0 + h], low_pair(a), high_pair(a), low_pair(b), high_pair(b), pb0, pb1);
        }
      }
    }
    __syncwarp();
  }
  wait_groups<0>();
  __syncthreads();

  // Merge the warps' states: each writes its rows' max and sum and its O^T to shared memory.
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
  row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
  float* merged_o = reinterpret_cast<float*>(smem);               // [WARPS, ROWS, D]
  float* merged_m = merged_o + WARPS * ROWS * D;                  // [WARPS, ROWS]
  float* merged_s = merged_m + WARPS * ROWS;
  if (c == 0 && g < ROWS) {
    merged_m[warp * ROWS + g] = row_max;
    merged_s[warp * ROWS + g] = row_sum;
  }
#pragma unroll
  for (int col = 0; col < 2; ++col) {
    const int row = 2 * c + col;
    if (row < ROWS) {
      float* dst = merged_o + (warp * ROWS + row) * D + g * EIGHTH;
#pragma unroll
      for (int m = 0; m < MTILES; ++m) {
        dst[2 * m] = o[m][col];
        dst[2 * m + 1] = o[m][2 + col];
      }
    }
  }
  __syncthreads();

  const bool written = range.start < range.end || last;
  for (int index = threadIdx.x; index < ROWS * D; index += WARPS * 32) {
    const int row = index / D, dim = index % D;
    float best = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) best = fmaxf(best, merged_m[w * ROWS + row]);
    const float base = best == -INFINITY ? 0.f : best;
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float weight = exp2f(merged_m[w * ROWS + row] - base);
      num += merged_o[(w * ROWS + row) * D + dim] * weight;
      den += merged_s[w * ROWS + row] * weight;
    }
    const int64_t beam_row = (int64_t)slot * BEAMS + row / GROUP;
    const int64_t q_head = (int64_t)head * GROUP + row % GROUP;
    if (p.splits == 1) {
      T* out = static_cast<T*>(p.out) + beam_row * p.stride_o_row + q_head * p.stride_o_head;
      out[dim] = T(num * (p.v_scale / den));
    } else if (written) {
      p.acc[split * p.stride_w_split + beam_row * p.stride_w_row + q_head * p.stride_w_head + dim] = num;
      if (dim == 0) {
        float* stats = p.stats + split * p.stride_s_split + beam_row * p.stride_s_row + q_head;
        stats[0] = best;
        stats[p.stride_s_kind] = den;
      }
    }
  }
}

}  // namespace

// One entry point a shape: D, beams, group, warps, stages, blocks an SM (__launch_bounds__' minimum: a register
// cap), the queries' dtype. The launcher (code/llm/cuda_decode.py) picks one by name and sets its shared memory:
// max(RING_BYTES, MERGE_BYTES) + (STAGED_PAGES + STAGED_IDS) x 4 bytes.
#define DECODE_ENTRY(D, BEAMS, GROUP, WARPS, STAGES, BLOCKS, T, NAME)                                           \
  extern "C" __global__ void __launch_bounds__(WARPS * 32, BLOCKS)                                              \
      paged_decode_fp8_d##D##_b##BEAMS##_g##GROUP##_w##WARPS##_s##STAGES##_m##BLOCKS##_##NAME(const DecodeParams p) { \
    decode_block<D, BEAMS, GROUP, WARPS, STAGES, T>(p);                                                         \
  }

#define DECODE_SHAPES(WARPS, STAGES, BLOCKS)                         \
  DECODE_ENTRY(256, 4, 1, WARPS, STAGES, BLOCKS, __nv_bfloat16, bf16) \
  DECODE_ENTRY(128, 1, 4, WARPS, STAGES, BLOCKS, __nv_bfloat16, bf16) \
  DECODE_ENTRY(256, 4, 1, WARPS, STAGES, BLOCKS, __half, f16)          \
  DECODE_ENTRY(128, 1, 4, WARPS, STAGES, BLOCKS, __half, f16)

// The launches timed by scripts/gpu/check_gptj_inflight.py --steps=decode_cuda: the engines' (4 warps, 3 buffers),
// two buffers, a cap of 4 blocks an SM (spills at head_dim 256), and 8 warps a block.
DECODE_SHAPES(4, 3, 1)
DECODE_SHAPES(4, 2, 1)
DECODE_SHAPES(4, 2, 4)
DECODE_SHAPES(8, 2, 1)
