// The TypeScript client's round trip for bench.py: execute `x = 1` in a
// context, send -> done, with the package in client/js (built: npm run build).
//   node tools/bench/rtt.mjs ENDPOINT CTX N WARM
// prints {"rtt": [seconds, ...]} on stdout.
import { Client } from "../../client/js/dist/index.js";

const [endpoint, ctx, n, warm] = process.argv.slice(2);
const c = await Client.connect(endpoint);
for (let i = 0; i < Number(warm); i++) await c.execute("x = 1", { ctx });
const rtt = [];
for (let i = 0; i < Number(n); i++) {
  const t0 = process.hrtime.bigint();
  const r = await c.execute("x = 1", { ctx });
  rtt.push(Number(process.hrtime.bigint() - t0) / 1e9);
  if (r.status !== "ok") throw new Error(`x = 1 ended ${r.status}`);
}
c.close();
process.stdout.write(JSON.stringify({ rtt }) + "\n");
