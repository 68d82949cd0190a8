/*
 * flame.c - folded stacks and an SVG flame graph.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flame.h"
#include "format.h"
#include "ma_error.h"

/* A frame of a folded line: its printable form (no line of its own), and
 * ':' for ';' (no frame of its own). */
static void put_name(FILE *f, const char *s)
{
	for (s = ma_printable(s); *s; s++)
		fputc(*s == ';' ? ':' : *s, f);
}

int ma_flame_folded(FILE *f, struct ma_profile *p)
{
	struct ma_symbolizer *sym = p->sym;

	for (size_t i = 0; i < p->hp->nstacks; i++) {
		double bytes = ma_profile_stack_bytes(p, i);
		uint32_t n = p->chain_len[i];

		if (n == 0 || llround(bytes) <= 0)
			continue;
		for (uint32_t k = n; k-- > 0;) {
			put_name(f, ma_sym_func_name(sym, sym->frames[ma_profile_frame(p, i, k)].func));
			if (k)
				fputc(';', f);
		}
		fprintf(f, " %lld\n", llround(bytes));
	}
	return ferror(f) ? ma_fail(MA_E_IO, "write error") : 0;
}

/* The call tree, root first, for the SVG. */
struct node {
	uint32_t func, parent, child, sibling;
	double value;
};

struct tree {
	struct node *n;
	size_t len, cap;
	uint32_t *slots; /* (parent, func) -> node */
	size_t nslots;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9e3779b97f4a7c15ULL;
	x ^= x >> 29;
	return x;
}

static int tree_rehash(struct tree *t)
{
	size_t ns = t->nslots ? t->nslots * 2 : 1 << 12;
	uint32_t *s = malloc(ns * sizeof(uint32_t));

	if (!s)
		return -1;
	memset(s, 0xff, ns * sizeof(uint32_t));
	for (size_t i = 1; i < t->len; i++) {
		size_t h = mix(((uint64_t)t->n[i].parent << 32) | t->n[i].func) & (ns - 1);

		while (s[h] != UINT32_MAX)
			h = (h + 1) & (ns - 1);
		s[h] = (uint32_t)i;
	}
	free(t->slots);
	t->slots = s;
	t->nslots = ns;
	return 0;
}

static uint32_t tree_child(struct tree *t, uint32_t parent, uint32_t func)
{
	size_t h;

	if ((t->len + 1) * 2 > t->nslots && tree_rehash(t))
		return UINT32_MAX;
	h = mix(((uint64_t)parent << 32) | func) & (t->nslots - 1);
	while (t->slots[h] != UINT32_MAX) {
		struct node *n = &t->n[t->slots[h]];

		if (n->parent == parent && n->func == func)
			return t->slots[h];
		h = (h + 1) & (t->nslots - 1);
	}
	if (t->len == t->cap) {
		size_t nc = t->cap * 2;
		struct node *nn = realloc(t->n, nc * sizeof(*nn));

		if (!nn)
			return UINT32_MAX;
		t->n = nn;
		t->cap = nc;
	}
	t->n[t->len] = (struct node){ func, parent, UINT32_MAX, t->n[parent].child, 0 };
	t->n[parent].child = (uint32_t)t->len;
	t->slots[h] = (uint32_t)t->len;
	return (uint32_t)t->len++;
}

#define SVG_W 1200.0
#define ROW_H 17
#define PAD 10.0

static const char svg_script[] =
	"<script type=\"text/ecmascript\"><![CDATA[\n"
	"var W=" "1180" ",X0=10,det,orig=[];\n"
	"function init(){det=document.getElementById('details').firstChild;\n"
	" var g=document.getElementsByTagName('g');for(var i=0;i<g.length;i++){var r=g[i].getElementsByTagName('rect')[0];\n"
	"  if(!r)continue;orig.push([g[i],+r.getAttribute('x'),+r.getAttribute('width')]);\n"
	"  g[i].onmouseover=function(){det.nodeValue=this.getElementsByTagName('title')[0].textContent};\n"
	"  g[i].onmouseout=function(){det.nodeValue=' '};\n"
	"  g[i].onclick=function(){zoom(this)};}}\n"
	"function fit(g,x,w){var r=g.getElementsByTagName('rect')[0],t=g.getElementsByTagName('text')[0];\n"
	" r.setAttribute('x',x);r.setAttribute('width',Math.max(w,0));t.setAttribute('x',x+3);\n"
	" var n=g.getAttribute('data-n'),c=Math.floor((w-6)/7);t.textContent=c<3?'':(n.length>c?n.substr(0,c-2)+'..':n);}\n"
	"function zoom(z){var zx=+z.getAttribute('data-x'),zw=+z.getAttribute('data-w'),zy=+z.getElementsByTagName('rect')[0].getAttribute('y');\n"
	" for(var i=0;i<orig.length;i++){var g=orig[i][0],x=+g.getAttribute('data-x'),w=+g.getAttribute('data-w'),y=+g.getElementsByTagName('rect')[0].getAttribute('y');\n"
	"  var inside=x>=zx-1e-9&&x+w<=zx+zw+1e-9,above=y<zy;\n"
	"  if(!inside&&!(above&&x<=zx&&x+w>=zx+zw)){g.style.display='none';continue;}\n"
	"  g.style.display='';if(inside){fit(g,X0+(x-zx)/zw*W,w/zw*W);}else{fit(g,X0,W);}}}\n"
	"function reset(){for(var i=0;i<orig.length;i++){var g=orig[i][0];g.style.display='';fit(g,orig[i][1],orig[i][2]);}}\n"
	"document.addEventListener('keydown',function(e){if(e.key=='Escape')reset();});\n"
	"]]></script>\n";

static void color(uint32_t func, const char *name, int *r, int *g, int *b)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	(void)func;
	*r = 205 + (int)(h % 50);
	*g = 80 + (int)((h >> 8) % 130);
	*b = (int)((h >> 16) % 55);
}

/* The call tree of P's stacks, root "all" at node 0, callers below callees;
 * *maxdepth: the longest stack. */
static int flame_tree(struct tree *t, struct ma_profile *p, size_t *maxdepth)
{
	t->cap = 1024;
	t->n = malloc(t->cap * sizeof(*t->n));
	if (!t->n || tree_rehash(t))
		return -1;
	t->n[0] = (struct node){ UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, 0 };
	t->len = 1;
	*maxdepth = 0;
	for (size_t i = 0; i < p->hp->nstacks; i++) {
		double bytes = ma_profile_stack_bytes(p, i);
		uint32_t cur = 0, n = p->chain_len[i];

		if (n == 0 || bytes <= 0)
			continue;
		t->n[0].value += bytes;
		for (uint32_t k = n; k-- > 0;) {
			cur = tree_child(t, cur, p->sym->frames[ma_profile_frame(p, i, k)].func);
			if (cur == UINT32_MAX)
				return -1;
			t->n[cur].value += bytes;
		}
		if (n > *maxdepth)
			*maxdepth = n;
	}
	return 0;
}

static void svg_head(FILE *f, double height, const char *title, double total)
{
	fprintf(f, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
		   "<svg version=\"1.1\" width=\"%.0f\" height=\"%.0f\" onload=\"init()\" "
		   "viewBox=\"0 0 %.0f %.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n",
		SVG_W, height, SVG_W, height);
	fputs("<style>text{font-family:monospace;font-size:12px;fill:#000}g:hover rect{stroke:#000;stroke-width:.5}"
	      "g{cursor:pointer}</style>\n", f);
	fputs(svg_script, f);
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
		   "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">heap in use: ",
		SVG_W / 2);
	ma_xml_text(f, title ? title : "", 200);
	fprintf(f, " (%.0f bytes, unsampled; click to zoom, Esc to reset)</text>\n"
		   "<text id=\"details\" x=\"%.0f\" y=\"%.0f\"> </text>\n",
		total, PAD, height - 12);
}

/* One frame: a box from x (a share of the total) as wide as its value, at row d. */
static void svg_frame(FILE *f, const char *name, uint32_t func, double x, double value, uint32_t d,
		      double total, double height)
{
	double px = PAD + x / total * (SVG_W - 2 * PAD);
	double pw = value / total * (SVG_W - 2 * PAD);
	double y = height - 40 - (double)(d + 1) * ROW_H;
	int r, g, b, chars = (int)((pw - 6) / 7);

	color(func, name, &r, &g, &b);
	fprintf(f, "<g data-x=\"%.6f\" data-w=\"%.6f\" data-n=\"", x / total, value / total);
	ma_xml_text(f, name, 300);
	fputs("\"><title>", f);
	ma_xml_text(f, name, 2000);
	fprintf(f, " (%.0f bytes, %.2f%%)</title><rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" "
		   "height=\"%d\" rx=\"2\" fill=\"rgb(%d,%d,%d)\"/><text x=\"%.2f\" y=\"%.0f\">",
		value, 100 * value / total, px, y, pw, ROW_H - 1, r, g, b, px + 3, y + ROW_H - 5);
	if (chars >= 3)
		ma_xml_text(f, name, (size_t)chars - 2);
	fputs("</text></g>\n", f);
}

/* A node still to draw in the depth-first walk, with its depth and x offset. */
struct walk_item {
	uint32_t id, depth;
	double x;
};

int ma_flame_svg(FILE *f, struct ma_profile *p, const char *title)
{
	struct tree t = { 0 };
	struct walk_item *todo = NULL;
	size_t maxdepth = 0, sp = 0, cap;
	double total, minw, height;
	int rc = 0;

	if (flame_tree(&t, p, &maxdepth))
		goto oom;
	total = t.n[0].value;
	minw = total / (SVG_W - 2 * PAD) * 0.5; /* narrower than half a pixel: left out */
	height = (double)(maxdepth + 1) * ROW_H + 70;
	svg_head(f, height, title, total);

	/* Depth-first walk; x advances through siblings. */
	cap = maxdepth + 2;
	todo = malloc(cap * sizeof(*todo));
	if (!todo)
		goto oom;
	todo[sp++] = (struct walk_item){ 0, 0, 0 };
	while (sp > 0 && total > 0) {
		struct walk_item w = todo[--sp];
		struct node *n = &t.n[w.id];
		double cx = w.x;

		if (n->value < minw)
			continue;
		svg_frame(f, w.id ? ma_sym_func_name(p->sym, n->func) : "all", n->func, w.x, n->value,
			  w.depth, total, height);
		/* Push the children with their x offsets (the last pushed is drawn first). */
		for (uint32_t c = n->child; c != UINT32_MAX; c = t.n[c].sibling) {
			if (sp == cap) { /* siblings can outnumber the depth */
				struct walk_item *grown = realloc(todo, cap * 2 * sizeof(*todo));

				if (!grown)
					goto oom;
				todo = grown;
				cap *= 2;
			}
			todo[sp++] = (struct walk_item){ c, w.depth + 1, cx };
			cx += t.n[c].value;
		}
	}
	fputs("</svg>\n", f);
	if (ferror(f))
		rc = ma_fail(MA_E_IO, "write error");
	goto out;
oom:
	rc = ma_fail(MA_E_NOMEM, "out of memory drawing the flame graph");
out:
	free(todo);
	free(t.n);
	free(t.slots);
	return rc;
}
