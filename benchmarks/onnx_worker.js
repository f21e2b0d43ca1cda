// Time a model.onnx in onnxruntime-node (run by benchmarks.serving, NODE_PATH set to the
// node_modules of benchmarks.serving_env.node_modules()).
//
//     node benchmarks/onnx_worker.js MODEL.onnx SHAPE BATCH CALLS REPEATS
//
// prints one JSON list: the seconds per call of each repeat (after a warm-up), as
// onnx_worker.py does for onnxruntime in Python.
const ort = require("onnxruntime-node");

async function main([path, shape, batch, calls, repeats]) {
  const session = await ort.InferenceSession.create(path);
  const dims = [Number(batch), ...shape.split(",").map(Number)];
  const count = dims.reduce((a, b) => a * b, 1);
  const pixels = (session.inputMetadata?.[0]?.type ?? "float32") === "uint8";
  const values = pixels ? Uint8Array.from({ length: count }, (_, i) => (i * 7919) % 256)
    : Float32Array.from({ length: count }, (_, i) => ((i * 7919) % 2001) / 1000 - 1);
  const feed = { [session.inputNames[0]]: new ort.Tensor(pixels ? "uint8" : "float32", values,
    dims) };
  for (let i = 0; i < 3; i++) await session.run(feed);
  const times = [];
  for (let r = 0; r < Number(repeats); r++) {
    const tic = process.hrtime.bigint();
    for (let c = 0; c < Number(calls); c++) await session.run(feed);
    times.push(Number(process.hrtime.bigint() - tic) / 1e9 / Number(calls));
  }
  console.log(JSON.stringify(times));
}

main(process.argv.slice(2)).catch((err) => { console.error(err.message); process.exit(1); });
