import { defineConfig } from 'vite';

// GraphiQL: page at / (the server serves dist/graphiql/index.html), assets under /graphiql/.
// Bundling notes that are not problems: React libraries' "use client" directives.
const quiet = (warning, warn) => {
  if (warning.code !== 'MODULE_LEVEL_DIRECTIVE') warn(warning);
};

export default defineConfig({
  root: 'graphiql',
  base: '/graphiql/',
  logLevel: 'warn',
  build: {
    outDir: '../dist/graphiql',
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 4000,
    // One bundle: GraphiQL's lazy chunks would split graphql-language-service in a cycle.
    rollupOptions: { onwarn: quiet, output: { inlineDynamicImports: true } },
  },
});
