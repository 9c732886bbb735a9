import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// node_modules is a read-only install the sandbox shares between sessions: Vite keeps its cache
// in the project instead (and `npm run dev` loads this file with `--configLoader runner`, which
// writes no bundled copy of it into node_modules).
export default defineConfig({
  cacheDir: '.vite',
  plugins: [react()],
})
