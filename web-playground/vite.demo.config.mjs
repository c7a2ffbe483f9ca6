import { defineConfig } from 'vite';

// The demo forum at /demo.
export default defineConfig({
  root: 'demo',
  base: '/demo/',
  logLevel: 'warn',
  build: { outDir: '../dist/demo', emptyOutDir: true, target: 'es2022' },
});
