// Shared by conv2d.wgsl and conv_transpose2d.wgsl (prepended to each).
// Parameters, as u32 words (written by conv_step in conv.rs):
//   p[0]                     output element count
//   p[1 .. 5]                batch, in channels, in height, in width
//   p[5 .. 9]                out channels, kernel height, kernel width, groups
//   p[9], p[10]              out height, out width
//   p[11], p[12]             padding top, left
//   p[13], p[14]             strides (h, w)
//   p[15], p[16]             dilations (h, w)
//   p[17]                    1 when a bias is bound
//   p[18 .. 22]              input strides (n, c, h, w)
//   p[22 .. 26]              filter strides, in the kernel's order
//   p[26 .. 30]              output strides (n, c, h, w)

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> f: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
