// Time a model.onnx in onnxruntime-node (run by benchmarks.serving, NODE_PATH set to the
// node_modules of benchmarks.serving_env.node_modules()).
//
//     node benchmarks/onnx_worker.js MODEL.onnx SHAPE BATCHES REPEATS
//
// BATCHES is BATCHxCALLS,... (1x20,16x4); prints one JSON list per batch: the seconds per call
// of each repeat (after a warm-up), as onnx_worker.py does for onnxruntime in Python.
const ort = require("onnxruntime-node");

async function main([path, shape, batches, repeats]) {
  const runtime = await ort.InferenceSession.create(path);
  const times = [];
  for (const item of batches.split(",")) {
    const [batch, calls] = item.split("x").map(Number);
    times.push(await timeBatch(runtime, shape, batch, calls, Number(repeats)));
  }
  console.log(JSON.stringify(times));
}

async function timeBatch(runtime, shape, batch, calls, repeats) {
  const dims = [batch, ...shape.split(",").map(Number)];
  const count = dims.reduce((a, b) => a * b, 1);
  const pixels = (runtime.inputMetadata?.[0]?.type ?? "float32") === "uint8";
  const values = pixels ? Uint8Array.from({ length: count }, (_, i) => (i * 7919) % 256)
    : Float32Array.from({ length: count }, (_, i) => ((i * 7919) % 2001) / 1000 - 1);
  const feed = { [runtime.inputNames[0]]: new ort.Tensor(pixels ? "uint8" : "float32", values,
    dims) };
  for (let i = 0; i < 3; i++) await runtime.run(feed);
  const times = [];
  for (let r = 0; r < repeats; r++) {
    const tic = process.hrtime.bigint();
    for (let c = 0; c < calls; c++) await runtime.run(feed);
    times.push(Number(process.hrtime.bigint() - tic) / 1e9 / calls);
  }
  return times;
}

main(process.argv.slice(2)).catch((err) => { console.error(err.message); process.exit(1); });
