/* page.c — the chat page (serve/page.html) built into the binary: the assembler includes the
 * file's bytes, so the server needs nothing beside itself and the page fetches nothing from
 * outside. serve/ */
#include <stddef.h>

#include "serve/serve_int.h"

/* .incbin takes the path from the directory make runs in (the repository root); the Makefile
 * names page.html as this object's prerequisite so an edited page rebuilds it. */
__asm__(".section .rodata\n"
        ".global serve_page_start\n"
        ".type serve_page_start, @object\n"
        "serve_page_start:\n"
        ".incbin \"serve/page.html\"\n"
        ".global serve_page_end\n"
        "serve_page_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char serve_page_start[], serve_page_end[];

const char *page_html(size_t *len)
{
    *len = (size_t)(serve_page_end - serve_page_start);
    return serve_page_start;
}
