// Drives ctxd-mcp (client/js/dist/mcp-main.js) with the MCP SDK's own
// Client over stdio, as a model's host does: argv[2] the JS package
// directory (client/js), argv[3] JSON {args: [ctxd-mcp's arguments],
// calls: [{name, arguments}]}. Prints one JSON line: the tools' schemas and
// each call's result, in order (a call the SDK rejects is a result with
// isError and its message).
const [pkg, spec] = process.argv.slice(2);
const sdk = `${pkg}/node_modules/@modelcontextprotocol/sdk/dist/esm/client`;
const { Client } = await import(`${sdk}/index.js`);
const { StdioClientTransport } = await import(`${sdk}/stdio.js`);
const { args, calls } = JSON.parse(spec);
const c = new Client({ name: "escape-classes", version: "1" });
await c.connect(new StdioClientTransport({ command: process.execPath, args: [`${pkg}/dist/mcp-main.js`, ...args], stderr: "ignore" }));
const out = { tools: (await c.listTools()).tools.map((t) => ({ name: t.name, schema: t.inputSchema })), results: [] };
for (const call of calls) {
  try {
    out.results.push(await c.callTool(call));
  } catch (e) {
    out.results.push({ isError: true, content: [{ type: "text", text: String(e.message) }] });
  }
}
await c.close();
process.stdout.write(JSON.stringify(out) + "\n");
