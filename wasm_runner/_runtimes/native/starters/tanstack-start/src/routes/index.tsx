import { useState } from 'react'
import { createFileRoute } from '@tanstack/react-router'

export const Route = createFileRoute('/')({ component: Home })

function Home() {
  const [count, setCount] = useState(0)
  return (
    <main>
      <h1>TanStack Start</h1>
      <button onClick={() => setCount((c) => c + 1)}>count is {count}</button>
      <p>Edit <code>src/routes/index.tsx</code> and save: the page updates.</p>
    </main>
  )
}
