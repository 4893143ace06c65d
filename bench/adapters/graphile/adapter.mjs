// graphile-worker for the harness: the line protocol of bench/adapters/_protocol.py, spoken by
// Node.js, through graphile-worker's public API only. Its packages are those of package-lock.json
// beside this file (installed by bench/node.py on first use).
//
//   node adapter.mjs MODE --dsn DSN [--jobs N] [--settings JSON]
//
// Worker settings (drain): concurrency, local_queue (localQueue.size; 0 leaves it off),
// complete_batch_delay (completeJobBatchDelay in ms; -1 leaves it off), pool (maxPoolSize),
// poll_interval (ms).

import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import pg from "pg";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    dsn: { type: "string" },
    jobs: { type: "string", default: "0" },
    settings: { type: "string", default: "{}" },
  },
});
const mode = positionals[0];
const dsn = values.dsn;
const jobs = Number(values.jobs);
const settings = JSON.parse(values.settings);

function say(line) {
  process.stdout.write(line + "\n");
}

// The moment now, in Unix seconds to the microsecond (Date.now() has only milliseconds).
function now() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

function stamp(n) {
  say(`stamp ${n} ${now().toFixed(6)}`);
}

// Warnings and errors only: graphile-worker logs every completed job at "info", and nobody
// running it for throughput keeps that (the harness reads standard error only at the end).
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`${level}: ${message}\n`);
  }
});

// The lines the harness writes: "go", "stop", "exit"; the end of input sets them all.
const heard = { go: null, stop: null, exit: null };
const events = Object.fromEntries(
  Object.keys(heard).map((word) => [word, new Promise((resolve) => (heard[word] = resolve))]),
);
const input = createInterface({ input: process.stdin });
input.on("line", (line) => heard[line.trim()]?.());
input.on("close", () => Object.values(heard).forEach((resolve) => resolve()));

let handled = 0;
const taskList = {
  noop: async () => {
    handled += 1;
  },
  tick: async (payload) => {
    stamp(payload.n);
  },
};

function workerOptions(pgPool) {
  const worker = { logger, concurrentJobs: Number(settings.concurrency ?? 1) };
  const localQueue = Number(settings.local_queue ?? 0);
  if (localQueue > 0) worker.localQueue = { size: localQueue };
  const delay = Number(settings.complete_batch_delay ?? -1);
  if (delay >= 0) {
    worker.completeJobBatchDelay = delay;
    worker.failJobBatchDelay = delay;
  }
  if (settings.poll_interval != null) worker.pollInterval = Number(settings.poll_interval);
  return { pgPool, taskList, noHandleSignals: true, preset: { worker } };
}

// Connected before "ready", as the other adapters are: the pool's connections are opened
// up front, so the drain's window holds the work and not the connecting.
async function warmPool() {
  const size = Number(settings.pool ?? 10); // graphile-worker's own default
  const pool = new pg.Pool({ connectionString: dsn, max: size });
  const clients = await Promise.all(Array.from({ length: size }, () => pool.connect()));
  clients.forEach((client) => client.release());
  return pool;
}

async function produceOneByOne(utils) {
  // One addJob per job, one at a time, gap seconds apart, numbered from settings.first.
  const gap = Number(settings.gap ?? 0) * 1000;
  const first = Number(settings.first ?? 0);
  const name = settings.job === "tick" ? "tick" : "noop";
  const starts = [];
  const started = performance.now();
  const cpu = process.cpuUsage();
  for (let i = 0; i < jobs; i++) {
    const n = first + i;
    starts.push(now());
    await utils.addJob(name, { n }, { jobKey: `key-${n}` });
    if (gap) await new Promise((resolve) => setTimeout(resolve, gap));
  }
  const used = process.cpuUsage(cpu);
  const figures = {
    seconds: (performance.now() - started) / 1000,
    process_cpu_seconds: (used.user + used.system) / 1e6,
  };
  if (settings.job === "tick") figures.starts = starts;
  return figures;
}

async function insert(utils, batch, keyed) {
  for (let first = 0; first < jobs; first += batch) {
    const specs = [];
    for (let n = first; n < Math.min(jobs, first + batch); n++) {
      const spec = { identifier: "noop", payload: { n } };
      if (keyed) spec.jobKey = `key-${n}`;
      specs.push(spec);
    }
    await utils.addJobs(specs);
  }
  return {};
}

async function drain(pool) {
  const runner = await run(workerOptions(pool));
  let shown = 0;
  const report = setInterval(() => {
    if (handled !== shown) {
      shown = handled;
      say(`count ${handled}`);
    }
  }, 10);
  await Promise.race([events.stop, runner.promise]);
  await runner.stop();
  await runner.promise;
  clearInterval(report);
  if (handled !== shown) say(`count ${handled}`);
  return { handled };
}

async function main() {
  if (mode === "stamp-worker") {
    // Library defaults but the logger; "ready" once it is up (start-up is timed from the
    // spawn to the first stamp, so this line is not what is measured).
    const runner = await run({ connectionString: dsn, logger, taskList });
    say("ready");
    await runner.promise;
    return;
  }
  let utils = null;
  let pool = null;
  let work;
  if (mode === "install") {
    await runMigrations({ connectionString: dsn, logger });
    work = async () => ({});
  } else if (mode === "drain") {
    pool = await warmPool();
    work = () => drain(pool);
  } else {
    utils = await makeWorkerUtils({ connectionString: dsn, logger });
    await utils.withPgClient(() => null); // connected before "ready"
    work = {
      fill: () => insert(utils, 1000, false),
      bulk: () => insert(utils, Number(settings.batch ?? 1000), true),
      enqueue: () => produceOneByOne(utils),
    }[mode];
    if (!work) throw new Error(`unknown mode ${mode}`);
  }
  say("ready");
  await events.go;
  const started = performance.now();
  const result = await work();
  result.seconds ??= (performance.now() - started) / 1000;
  say("result " + JSON.stringify(result));
  await events.exit;
  await utils?.release();
  await pool?.end();
  input.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error?.stack ?? error}\n`);
    process.exit(1);
  },
);
