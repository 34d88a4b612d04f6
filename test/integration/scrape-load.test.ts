/**
 * Scraping must not delay the adverts. An Active agent (with a stand-in
 * apiserver as its backend, so /status and /metrics carry what a real node's do) is scraped by
 * 20 clients in its namespace, 10 Hz each, half on /metrics and half on /status (lab/clients/
 * scraper.ts: keep-alive, never two requests at once per client, bounded in time), while tcpdump
 * on its interface records its adverts, with stress-ng busy on both cores (the CPU and IO
 * load). The bound is relative (the acceptance's): the 99th percentile of the gaps between adverts
 * within 1.1 × Advertisement_Interval (100 ms here, so that 15 s give ~150 gaps).
 *
 * On the code before the fix (every scrape rendered again, the pacer stepping in at 1.5
 * intervals) 3 runs of 4 failed: p99 165.8 / 150.2 / 150.1 ms (max up to 254 ms), scrapes' p99
 * 100–120 ms; one passed at 109.7 ms. After (one rendering per 250 ms, the pacer at 5 %; 100 ms since): p99
 * 105.3–108.8 ms in 4 runs, scrapes' p99 30–75 ms under this load. The margin is thin on 2
 * shared cores: a failure here is worth a rerun before a hunt, and a second one is not noise.
 */
import { describe, expect, it } from 'vitest';
import type { Lab } from '../../lab/lab.js';
import { compiledScript, onJsonLines } from '../../lab/lab.js';
import { waitForHolder } from '../../lab/cluster.js';
import type { ScrapeReport } from '../../lab/clients/scraper.js';
import { quantile } from '../../lab/clients/scraper.js';
import { needs, sleep, useElectionLab } from '../support/index.js';

const PREFIX = 'b27f';
const SUBNET = 194;
/** Advertisement_Interval: short, so that 15 s give 150 gaps (p99: the second largest); the bound is relative. */
const INTERVAL_MS = 100;
const SCRAPE_MS = 15_000;
const SCRAPERS = 20;
const SCRAPE_EVERY_MS = 100;

describe.skipIf(needs('root') ?? needs('tcpdump') ?? needs('stress-ng'))(
  'scraping the admin endpoint does not delay the adverts under CPU and IO load (root, tcpdump, stress-ng; skipped otherwise)',
  () => {
    let lab!: Lab;
    const { start } = useElectionLab({ prefix: PREFIX, subnet: SUBNET, nodes: 3, ipv6: false, apiservers: true }, (l) => (lab = l));

    it(`${SCRAPERS} scrapers at ${1000 / SCRAPE_EVERY_MS} Hz on /metrics and /status, stress-ng on both cores: the holder's advert gaps within 1.1 × the interval at p99`, async () => {
      // vrrp.realtimePriority, as docs/config.md advises for a node whose cores are all busy: CPU hogs
      // on 2 shared cores starve any thread of normal priority for tens of ms now and then
      const [a1] = await start([{ priority: 150, advertisementInterval: `${INTERVAL_MS}ms`, balance: true, realtimePriority: 10 }]);
      const n1 = lab.nodes[0]!;
      await waitForHolder(lab, lab.vip4, 'n1');
      // what one scrape costs without load: one client per path, one request at a time
      const single = lab.spawn(n1.netns, [
        process.execPath,
        compiledScript('scraper'),
        '--base',
        `http://127.0.0.1:${a1!.adminPort}`,
        '--path',
        '/metrics',
        '--path',
        '/status',
        '--count',
        '2',
        '--interval',
        '50',
        '--duration',
        '1500',
      ]);
      let cost: ScrapeReport | undefined;
      onJsonLines<ScrapeReport>(single, (r) => void (cost = r));
      await single.exited;
      console.log(`one scrape, no load: ${JSON.stringify(cost?.paths)}`);
      const cap = lab.spawn(n1.netns, ['tcpdump', '-i', 'eth0', '-n', '-l', '--immediate-mode', '-tt', 'ip proto 112 and src host', n1.ipv4]);
      await cap.waitForOutput(/listening on/, { timeoutMs: 5000, includeExisting: true });
      // the CPU and IO load beside the scrapers: both cores busy (bounded: stress-ng's own timeout)
      const load = lab.spawn(n1.netns, ['stress-ng', '--cpu', '2', '--io', '1', '--timeout', `${Math.ceil(SCRAPE_MS / 1000) + 1}s`, '--quiet']);
      let report: ScrapeReport | undefined;
      const scrapers = lab.spawn(n1.netns, [
        process.execPath,
        compiledScript('scraper'),
        '--base',
        `http://127.0.0.1:${a1!.adminPort}`,
        '--path',
        '/metrics',
        '--path',
        '/status',
        '--count',
        String(SCRAPERS),
        '--interval',
        String(SCRAPE_EVERY_MS),
        '--duration',
        String(SCRAPE_MS),
      ]);
      onJsonLines<ScrapeReport>(scrapers, (r) => void (report = r));
      const t0 = Date.now();
      await scrapers.exited;
      const t1 = Date.now();
      await sleep(2 * INTERVAL_MS);
      await cap.stop('SIGINT', 3000);
      await load.stop('SIGTERM', 3000);
      // the adverts sent while the scrapers ran (tcpdump -tt: epoch seconds)
      const times = [...cap.output().matchAll(/^(\d+\.\d+) IP /gm)].map((m) => Number(m[1]) * 1000).filter((t) => t >= t0 && t <= t1);
      const gaps = times.slice(1).map((t, i) => t - times[i]!);
      const p99 = quantile(gaps, 0.99);
      const max = gaps.length ? Math.max(...gaps) : 0;
      console.log(
        `${INTERVAL_MS} ms adverts, ${SCRAPERS} scrapers × ${1000 / SCRAPE_EVERY_MS} Hz for ${SCRAPE_MS} ms: ${gaps.length} gaps, p50 ${quantile(gaps, 0.5).toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${max.toFixed(1)} ms; scrapes ${JSON.stringify(report)}`,
      );
      expect(report, "the scrapers' report").toBeDefined();
      expect(report!.failures, report!.firstError ?? '').toBe(0);
      // the load was there: most of the scrapes asked for were answered
      expect(report!.requests).toBeGreaterThanOrEqual(0.8 * SCRAPERS * (SCRAPE_MS / SCRAPE_EVERY_MS));
      expect(gaps.length).toBeGreaterThanOrEqual(0.9 * (SCRAPE_MS / INTERVAL_MS) - 1);
      expect(p99).toBeLessThanOrEqual(1.1 * INTERVAL_MS);
    });
  },
);
