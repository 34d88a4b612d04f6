/**
 * One apply at a time, and bursts coalesced: calls to {@link Coalescer.schedule} while an apply
 * is queued but not started share that apply; a call during a running apply queues exactly one
 * more. Used by both data-plane controllers (nftables for the VIP, the local endpoint).
 */
export class Coalescer {
  private queue: Promise<void> = Promise.resolve();
  private scheduled = false;

  /** @param run the apply; it must not throw (log instead): a rejection would stop the queue. */
  constructor(private readonly run: () => Promise<void>) {}

  /** Queues an apply unless one is already waiting; resolves when that apply is done. */
  schedule(): Promise<void> {
    if (!this.scheduled) {
      this.scheduled = true;
      this.queue = this.queue.then(async () => {
        this.scheduled = false;
        await this.run();
      });
    }
    return this.queue;
  }

  /** Resolves when every apply queued so far is done (at once when none is); never rejects. */
  idle(): Promise<void> {
    return this.queue;
  }
}
