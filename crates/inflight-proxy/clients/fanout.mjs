// Calls URL COUNT times at once, one fetch per call, and prints what came back as JSON.

function isHttpUrl(text) {
  try {
    return ["http:", "https:"].includes(new URL(text).protocol);
  } catch {
    return false;
  }
}

const [url = "", countArg = "500"] = process.argv.slice(2);
const count = Number(countArg);
if (!isHttpUrl(url) || !/^[0-9]+$/.test(countArg) || count < 1) {
  console.error("usage: node fanout.mjs URL [COUNT]");
  console.error("  URL: http:// or https://; COUNT: a whole number, at least 1 (default 500)");
  process.exit(2);
}

if (typeof fetch !== "function") {
  console.error(`fanout.mjs needs Node 18 or later (for fetch); this is Node ${process.version}`);
  process.exit(2);
}

async function call(url) {
  try {
    const response = await fetch(url);
    await response.arrayBuffer();
    return response.ok ? "ok" : String(response.status);
  } catch (error) {
    return error.cause?.code ?? error.cause?.message ?? error.message;
  }
}

const started = performance.now();
const results = await Promise.all(Array.from({ length: count }, () => call(url)));
const elapsed = (performance.now() - started) / 1000;

const failed = results.filter((result) => result !== "ok");
const failedByStatus = {};
for (const status of failed) {
  failedByStatus[status] = (failedByStatus[status] ?? 0) + 1;
}
console.log(JSON.stringify({
  ok: count - failed.length,
  failed: failed.length,
  failed_by_status: failedByStatus,
  elapsed_s: Math.round(elapsed * 1000) / 1000,
}));
process.exitCode = failed.length > 0 ? 1 : 0;
