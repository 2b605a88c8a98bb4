#!/usr/bin/env node
/**
 * Build step after tsc: copies the dashboard's files (ops/dashboard/) and the chart library it
 * uses (uPlot, from node_modules) into dist/ops/dashboard/, so the package serves them itself
 * (no CDN at run time).
 */
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const out = path.join(root, 'dist', 'ops', 'dashboard');
fs.mkdirSync(out, { recursive: true });
const src = path.join(root, 'ops', 'dashboard');
for (const f of fs.readdirSync(src))
  if (!f.endsWith('.ts')) fs.copyFileSync(path.join(src, f), path.join(out, f));
const uplot = path.dirname(createRequire(import.meta.url).resolve('uplot/package.json'));
fs.copyFileSync(path.join(uplot, 'dist', 'uPlot.iife.min.js'), path.join(out, 'uPlot.iife.min.js'));
fs.copyFileSync(path.join(uplot, 'dist', 'uPlot.min.css'), path.join(out, 'uPlot.min.css'));
fs.copyFileSync(path.join(uplot, 'LICENSE'), path.join(out, 'uPlot.LICENSE.txt'));
