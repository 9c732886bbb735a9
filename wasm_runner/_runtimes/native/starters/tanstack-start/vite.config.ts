import { defineConfig } from 'vite'
import { tanstackStart } from '@tanstack/react-start/plugin/vite'
import viteReact from '@vitejs/plugin-react'

// node_modules is a read-only copy the sandbox shares between sessions: Vite keeps its cache in
// the project instead. The dev server is reached only through the service's preview link, whose
// host name is the operator's choice: any Host is accepted.
export default defineConfig({
  cacheDir: '.vite',
  server: { port: 3000, allowedHosts: true },
  plugins: [tanstackStart(), viteReact()],
})
