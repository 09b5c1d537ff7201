import { describe, expect, it } from 'vitest';
import { checkReply, EARLY_REPLIES_PER_REQUEST } from './reply-check';
import { requestRef } from './reply-protocol';

const aReply = (request: string) => ({ correlationId: 'c', request, body: { responses: [] } });
const written = requestRef('prices', 0, '1-0');

describe('a client accepts a reply only from the entry it wrote (SPEC 10.4)', () => {
  it('a reply from the written entry is accepted; one from any other entry, or naming none, is refused', () => {
    expect(checkReply({ sent: written, early: [] }, aReply(written))).toEqual({ accept: true });
    expect(checkReply({ sent: written, early: [] }, aReply(requestRef('echo', 0, '1-0')))).toHaveProperty('refuse');
    expect(checkReply({ sent: written, early: [] }, aReply(requestRef('prices', 1, '1-0')))).toHaveProperty('refuse');
    expect(checkReply({ sent: written, early: [] }, aReply(''))).toHaveProperty('refuse');
  });

  it('before the XADD answered, up to EARLY_REPLIES_PER_REQUEST replies are held; the next is refused', () => {
    const request = { early: [] as ReturnType<typeof aReply>[] };
    for (let i = 0; i < EARLY_REPLIES_PER_REQUEST; i++) {
      expect(checkReply(request, aReply(written))).toEqual({ hold: true });
      request.early.push(aReply(written));
    }
    expect(checkReply(request, aReply(written))).toEqual({ refuse: expect.stringContaining(`more than ${EARLY_REPLIES_PER_REQUEST}`) });
  });
});
