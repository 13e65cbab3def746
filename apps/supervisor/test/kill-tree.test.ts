// Killing an exec's whole process tree, found by its tag.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { findTaggedProcesses, killExecTree, readProcStat } from '../src/kill-tree.ts';
import { killTagged, taggedPids, waitFor } from './helpers.ts';

describe('killExecTree', () => {
  const prefix = `k${process.pid}-${randomUUID().slice(0, 8)}-`;
  afterAll(() => killTagged(prefix));

  function startTree(id: string, script: string) {
    const child = spawn('sh', ['-c', script], {
      detached: true,
      stdio: 'ignore',
      env: { PATH: process.env.PATH, SANDGATE_EXEC_ID: id },
    });
    return child;
  }

  it('kills the group, setsid escapees and double-forked orphans', async () => {
    const id = `${prefix}1`;
    const child = startTree(id, 'setsid sleep 700 & (sleep 701 &) ; sleep 702');
    await waitFor('tree', () => taggedPids(id).length >= 4);
    expect(findTaggedProcesses(id).size).toBe(taggedPids(id).length);
    expect(await killExecTree(id, child.pid)).toBe(true);
    expect(taggedPids(id)).toEqual([]);
  });

  it('SIGKILLs processes that ignore SIGTERM after the grace period', async () => {
    const id = `${prefix}2`;
    const child = startTree(id, "trap '' TERM; setsid sh -c \"trap '' TERM; sleep 703\" & sleep 704");
    await waitFor('tree', () => taggedPids(id).length >= 3);
    const started = Date.now();
    expect(await killExecTree(id, child.pid, { graceMs: 300 })).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(taggedPids(id)).toEqual([]);
  });

  it('kills group members that scrubbed their environment', async () => {
    const id = `${prefix}3`;
    const child = startTree(id, 'env -i /bin/sleep 705 & sleep 706');
    await waitFor('tree', () => taggedPids(id).length >= 2);
    const groupPids = () =>
      fs
        .readdirSync('/proc')
        .filter((e) => /^\d+$/.test(e))
        .filter((e) => readProcStat(Number(e))?.pgrp === child.pid && readProcStat(Number(e))?.state !== 'Z');
    await waitFor('scrubbed child', () => groupPids().length >= 3);
    expect(await killExecTree(id, child.pid)).toBe(true);
    expect(groupPids()).toEqual([]);
  });

  it('does nothing harmful for an unknown exec', async () => {
    expect(await killExecTree(`${prefix}none`, undefined)).toBe(true);
  });
});
