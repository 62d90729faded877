// Builds the WebUI into dist/ for the master to serve at `/`. `npm run dev` serves it with hot
// reload and forwards the API and the task proxy to a running master (CAIRN_MASTER, default http://127.0.0.1:8080).
import { defineConfig } from "vite";

const master = process.env.CAIRN_MASTER ?? "http://127.0.0.1:8080";

export default defineConfig({
  base: "/",
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // Hashed file names under assets/ are what the master caches for a year.
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 200,
  },
  server: {
    proxy: {
      "/api": { target: master, changeOrigin: false },
      "/healthz": { target: master },
      // Notebooks and TensorBoards through the master's proxy, their websockets included.
      "/proxy": { target: master, changeOrigin: false, ws: true },
    },
  },
});
